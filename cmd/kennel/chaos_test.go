package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
	dockerclient "github.com/moby/moby/client"
)

// TestChaosSIGKILLedDaemonLosesNoCell: 20 sessions (14 local, 3 Docker, 3 ssh) under a
// load client whose every cell increments its session's counter under an idempotency key
// of its own, retried with that key through every failure, and a job client starting
// shell jobs of known output; `kennel serve` is SIGKILLed at 10 random moments and
// started again each time. At the end every cell was answered exactly once (a retry is
// the same answer) or reported unknown, each session's counter equals the cells that
// reported ok (none ran twice, none was lost), every job whose start was answered ended
// with its output exactly what it wrote, and every kernel is the one its session started
// (none lost, none leaked).
func TestChaosSIGKILLedDaemonLosesNoCell(t *testing.T) {
	const sessions, kills = 20, 10
	engine := dockerneed.KernelEngine(t)
	srv := sshtest.Start(t)
	sshHome(t, srv) // the daemon's HOME, and so its ~/.ssh/config and known_hosts
	base, err := os.MkdirTemp("", "kt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) }) // ends the kernels (their run directories go)
	sock := filepath.Join(base, "run", "kennel.sock")
	state := filepath.Join(base, "state")
	var mu sync.Mutex
	var daemon *exec.Cmd
	var daemonDone chan struct{}
	var logs []*syncBuf // each daemon's stderr, shown when the test fails
	t.Cleanup(func() {
		if t.Failed() {
			for i, l := range logs {
				t.Logf("daemon %d's log:\n%s", i+1, l.String())
			}
			_ = filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Name() == "kernel.log" {
					if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
						t.Logf("%s:\n%s", p, b[max(0, len(b)-4096):])
					}
				}
				return nil
			})
		}
	})
	start := func() {
		cmd := kennelCmd(t, t.TempDir(), "serve", "--socket", sock, "--state", state)
		errb := &syncBuf{}
		logs = append(logs, errb)
		cmd.Stderr = errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		mu.Lock()
		daemon, daemonDone = cmd, done
		mu.Unlock()
		c := client.New(sock)
		defer c.Close()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if _, err := c.Sessions(context.Background()); err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("kennel serve did not answer within 20 s; stderr:\n%s", errb.String())
			}
		}
	}
	start()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		_ = testproc.Kill(daemon.Process.Pid, syscall.SIGTERM)
		<-daemonDone
	})
	c := client.New(sock)
	defer c.Close()
	ctx := context.Background()
	ids := make([]string, sessions)
	kinds := make([]string, sessions)
	for i := range ids {
		req := api.CreateSession{Cwd: t.TempDir()}
		switch kinds[i] = "local"; {
		case i >= sessions-3:
			kinds[i], req.Cwd = "ssh", ""
			req.Transport = &api.Transport{SSH: &api.SSH{Target: sshtest.Alias}}
		case i >= sessions-6:
			kinds[i] = "docker"
			req.Transport = &api.Transport{Docker: &api.Docker{}}
		}
		s, err := c.CreateSession(ctx, req, client.CreateOptions{})
		if err != nil {
			t.Fatalf("create a %s session: %v", kinds[i], err)
		}
		ids[i] = s.ID
	}
	kernels := kernelIDs(t, c, ids)

	// The load: each session's client sends keyed cells one after another until told to stop.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	oks := make([]int, sessions)
	unknowns := make([]int, sessions)
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lc := client.New(sock)
			defer lc.Close()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("%s-%d", id, n)
				code := "counter = globals().get('counter', 0) + 1\nimport time; time.sleep(" + strconv.FormatFloat(rand.Float64()*0.05, 'f', 3, 64) + ")\ncounter"
				var first *api.CellReply
				for deadline := time.Now().Add(60 * time.Second); ; {
					rep, err := lc.RunCellOnce(ctx, id, key, api.RunCell{Code: code})
					if err != nil || rep.State == "backgrounded" {
						if time.Now().After(deadline) {
							t.Errorf("key %s: no answer within 60 s: %+v, %v", key, rep, err)
							return
						}
						time.Sleep(20 * time.Millisecond) // the daemon is down or restarting: the same key again
						continue
					}
					first = rep
					break
				}
				// A second ask of the same key is the same answer.
				for {
					again, err := lc.RunCellOnce(ctx, id, key, api.RunCell{Code: code})
					if err != nil || again.State == "backgrounded" {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					if again.State != first.State || (first.Cell != nil && (again.Cell == nil || *again.Cell.Result != *first.Cell.Result)) {
						t.Errorf("key %s answered %+v, then %+v", key, first, again)
					}
					break
				}
				switch {
				case first.State == "settled" && first.Cell != nil && first.Cell.Status == "ok":
					oks[i]++
				case first.State == "unknown":
					unknowns[i]++
				default:
					t.Errorf("key %s: %+v", key, first)
				}
			}
		}()
	}
	// Beside the cells, each session's job client starts shell jobs of known output one
	// after another, at most two running at once; a start the daemon did not answer (it
	// was killed) is not counted: it may or may not run, and nobody knows its id.
	var jobsMu sync.Mutex
	type startedJob struct{ session, id, want string }
	var started []startedJob
	unanswered := 0
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lc := client.New(sock)
			defer lc.Close()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(100+rand.IntN(400)) * time.Millisecond):
				}
				lines := 100 + rand.IntN(400)
				var want strings.Builder
				for i := range lines {
					fmt.Fprintf(&want, "line %d of job %d\n", i, n)
				}
				cmd := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "line $i of job %d"; i=$((i+1)); if [ $((i %% 50)) -eq 0 ]; then sleep 0.05; fi; done`, lines, n)
				j, err := lc.RunJob(ctx, id, cmd)
				jobsMu.Lock()
				if err != nil {
					unanswered++
				} else {
					started = append(started, startedJob{id, j.ID, want.String()})
				}
				jobsMu.Unlock()
			}
		}()
	}
	for k := range kills {
		time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
		mu.Lock()
		cmd, done := daemon, daemonDone
		mu.Unlock()
		if err := testproc.Kill(cmd.Process.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-done
		t.Logf("kill %d", k+1)
		start()
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	total := 0
	for i, id := range ids {
		rep, err := c.RunCell(ctx, id, api.RunCell{Code: "globals().get('counter', 0)"})
		if err != nil || rep.Cell == nil || rep.Cell.Result == nil {
			t.Fatalf("session %s: the counter: %+v, %v", id, rep, err)
		}
		if got := *rep.Cell.Result; got != strconv.Itoa(oks[i]) || unknowns[i] != 0 {
			t.Errorf("session %s: counter %s, %d cells ok, %d unknown: want the counter to equal the cells ok, none unknown (no kernel was lost)", id, got, oks[i], unknowns[i])
		}
		total += oks[i]
	}
	// Every job whose start was answered ends, and its output is exactly what it wrote:
	// none of it lost across the kills, none twice.
	unseen, whole, lostJobs := 0, 0, 0
	kindOf := map[string]string{}
	for i, id := range ids {
		kindOf[id] = kinds[i]
	}
	for _, j := range started {
		var st api.Job
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			list, err := c.Jobs(ctx, j.session)
			if err == nil {
				if k := slices.IndexFunc(list, func(x api.Job) bool { return x.ID == j.id }); k >= 0 {
					st = list[k]
				}
			}
			if st.State == "ended" || st.State == "unknown" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session %s: job %s did not end within 90 s: %+v, %v", j.session, j.id, st, err)
			}
		}
		if st.State == "unknown" {
			t.Errorf("session %s: job %s is unknown: no daemon picked it up", j.session, j.id)
			continue
		}
		if st.End == nil || st.End.ExitCode == nil {
			unseen++ // it ended while no daemon was attached, its end taken by one that died
		} else if *st.End.ExitCode != 0 {
			t.Errorf("session %s: job %s ended %+v", j.session, j.id, st.End)
		}
		// Every byte it wrote is counted (seen); what is kept reads back as written. Bytes
		// lost are those a daemon consumed and gave back the disk of before it died with
		// them: counted, never read twice or as other bytes.
		head, err := c.Output(ctx, j.session, j.id, 0, 0)
		if err != nil {
			t.Errorf("session %s: job %s: its count: %v", j.session, j.id, err)
			continue
		}
		var got []byte
		for off := int64(0); ; {
			p, err := c.Output(ctx, j.session, j.id, off, 1<<16)
			if err != nil {
				lostJobs++ // the rest was not retained
				break
			}
			got = append(got, p.Data...)
			off += int64(len(p.Data))
			if p.EOF {
				break
			}
		}
		if head.Seen != int64(len(j.want)) || !strings.HasPrefix(j.want, string(got)) {
			t.Errorf("%s session %s: job %s: %d bytes counted, %d read (a prefix of what it wrote: %v); want the %d it wrote counted", kindOf[j.session], j.session, j.id, head.Seen, len(got), strings.HasPrefix(j.want, string(got)), len(j.want))
		}
		if len(got) == len(j.want) {
			whole++
		}
	}
	t.Logf("%d jobs counted exactly, %d of them read back whole, %d with bytes lost (counted); %d ended unseen (their exit not known); %d starts not answered", len(started), whole, lostJobs, unseen, unanswered)
	after := kernelIDs(t, c, ids)
	for i := range ids {
		if after[i] != kernels[i] {
			t.Errorf("%s session %s: kernel %s at the end, %s at the start: a kernel was lost", kinds[i], ids[i], after[i], kernels[i])
		}
		if kinds[i] == "docker" {
			if n := containersOfSession(t, engine, ids[i]); n != 1 {
				t.Errorf("docker session %s: %d containers, want its one", ids[i], n)
			}
		}
	}
	t.Logf("%d cells ok through %d SIGKILLs of the daemon", total, kills)
	// No local kernel leaked: every kernel left under the state's run directory is one
	// of the sessions'.
	var stray []int
	all, _ := procfs.All()
	for _, st := range all {
		if !st.Zombie() && inRunDir(st.PID, base) && !slices.ContainsFunc(after, func(k string) bool { return inKernel(st.PID, k) }) {
			stray = append(stray, st.PID)
		}
	}
	if len(stray) > 0 {
		t.Errorf("kernels of no session left running: %v", stray)
	}
}

// kernelIDs is each session's kernel id (instance_id), waiting for every one to run.
func kernelIDs(t *testing.T, c *client.Client, ids []string) []string {
	t.Helper()
	out := make([]string, len(ids))
	for i, id := range ids {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			s, err := c.Session(context.Background(), id)
			if err == nil && s.Kernel.State != nil && *s.Kernel.State == "running" && s.Kernel.InstanceID != nil {
				out[i] = *s.Kernel.InstanceID
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session %s: no running kernel: %+v, %v", id, s, err)
			}
		}
	}
	return out
}

// inKernel reports whether process pid runs in the run directory of kernel id.
func inKernel(pid int, id string) bool {
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	return err == nil && bytes.Contains(env, []byte("/"+id+"\x00"))
}

// containersOfSession counts the containers labelled with session id.
func containersOfSession(t *testing.T, cli *dockerclient.Client, id string) int {
	t.Helper()
	res, err := cli.ContainerList(context.Background(), dockerclient.ContainerListOptions{All: true,
		Filters: make(dockerclient.Filters).Add("label", docker.LabelSession+"="+id)})
	if err != nil {
		t.Fatal(err)
	}
	return len(res.Items)
}

// inRunDir reports whether process pid's environment names a run directory under base.
func inRunDir(pid int, base string) bool {
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	return err == nil && bytes.Contains(env, []byte("KENNEL_KERNEL_RUN="+base))
}
