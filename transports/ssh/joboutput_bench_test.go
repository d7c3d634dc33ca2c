package ssh_test

import (
	"io"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
)

// benchJobBytes is what each job of the job-output benchmarks writes.
const benchJobBytes = 256 << 20

// benchJobCommand writes benchJobBytes.
const benchJobCommand = "head -c 256M /dev/zero"

// BenchmarkSSHJobOutput: job output from a remote kernel (sshd on 127.0.0.1, behind
// sshtest's counting proxy) to the controller's capture: a shell job `head -c 256M
// /dev/zero`, its stdout a file in the kernel's run directory that a relay tails and
// streams raw over an ssh session of its own; from RunJob to the job's settled end with
// every byte counted. Compare with BenchmarkSSHCat, in the same run.
func BenchmarkSSHJobOutput(b *testing.B) {
	s := startJobSession(b, sshtest.Start(b), false, 0)
	benchJobs(b, s)
}

// BenchmarkSSHJobOutputFrames is BenchmarkSSHJobOutput with the kernel's output file
// opens refused (a cell makes its stub's opener fail): the output goes through
// job_output frames, as it did before the relay.
func BenchmarkSSHJobOutputFrames(b *testing.B) {
	s := startJobSession(b, sshtest.Start(b), false, 0)
	refuseFiles(b, s)
	benchJobs(b, s)
}

// refuseFiles makes s's kernel refuse every job's output files.
func refuseFiles(b *testing.B, s *controller.Session) {
	execCell(b, s, `import kennel._jobs as _j
_j._open_fifos = lambda job_id, out, err: (None, "refused by the benchmark")`)
}

func benchJobs(b *testing.B, s *controller.Session) {
	b.SetBytes(benchJobBytes)
	for b.Loop() {
		benchJob(b, s)
	}
}

// benchJob runs one benchJobCommand job in s to its end.
func benchJob(b *testing.B, s *controller.Session) {
	_, st := settleJob(b, s, benchJobCommand, 5*time.Minute)
	if st.End.ExitCode == nil || *st.End.ExitCode != 0 || st.Output.TotalBytes != benchJobBytes {
		b.Fatalf("job did not settle with exit 0 and all its bytes: %+v, %d bytes", st.End, st.Output.TotalBytes)
	}
}

// BenchmarkSSHCat is the baseline on the same transport: `head -c 256M /dev/zero | cat`
// run on the host in a session of the same connection (as `ssh host 'head ... | cat'`
// does), its stdout read to the end in this process.
func BenchmarkSSHCat(b *testing.B) {
	srv := sshtest.Start(b)
	cat := sshCat(b, newHosts(b, srv))
	b.SetBytes(benchJobBytes)
	for b.Loop() {
		cat()
	}
}

// BenchmarkSSHJobOutputVsCat runs BenchmarkSSHJobOutput's job and BenchmarkSSHCat's
// command once each per iteration on one host, their order alternating, so that the
// machine's load hits both alike; it reports each one's median throughput and
// job/cat.
func BenchmarkSSHJobOutputVsCat(b *testing.B) {
	srv := sshtest.Start(b)
	s := startJobSession(b, srv, false, 0)
	benchVsCat(b, srv, "job", func() { benchJob(b, s) })
}

// BenchmarkSSHRelayVsCat is BenchmarkSSHJobOutputVsCat at the transport's level, with
// no controller and no kernel job: `head -c 256M /dev/zero` (on this machine, sshtest's
// host) appends to the stdout file a kernel's OpenJobOutput made (Keep 1 MiB), and the
// stream is read to its end (End once head exited); it reports relay/cat.
func BenchmarkSSHRelayVsCat(b *testing.B) {
	srv := sshtest.Start(b)
	jo, _ := outputKernel(b, srv, false)
	buf := make([]byte, 256<<10)
	benchVsCat(b, srv, "relay", func() {
		out, err := jo.OpenJobOutput(benchCtx(b), transports.JobOutputRequest{Keep: 1 << 20})
		if err != nil {
			b.Fatal(err)
		}
		defer out.Close()
		stdout, _ := out.Paths()
		head := exec.Command("sh", "-c", `exec head -c 256M /dev/zero >>"$1"`, "sh", stdout)
		if err := head.Start(); err != nil {
			b.Fatal(err)
		}
		go func() {
			_ = head.Wait()
			out.End()
		}()
		go func() { _, _ = io.Copy(io.Discard, out.Stderr()) }()
		if n, err := io.CopyBuffer(io.Discard, out.Stdout(), buf); err != nil || n != benchJobBytes {
			b.Fatalf("read %d bytes: %v", n, err)
		}
	})
}

// benchVsCat runs run and BenchmarkSSHCat's command on srv once each per iteration,
// their order alternating, and reports each one's median throughput (name-MB/s,
// cat-MB/s) and name/cat.
func benchVsCat(b *testing.B, srv *sshtest.Server, name string, run func()) {
	cat := sshCat(b, newHosts(b, srv))
	runs := []func(){run, cat}
	took := make([][]time.Duration, len(runs))
	for i := range b.N {
		for k := range runs {
			r := (i + k) % len(runs)
			t0 := time.Now()
			runs[r]()
			took[r] = append(took[r], time.Since(t0))
		}
	}
	mbps := make([]float64, len(runs))
	for r, ds := range took {
		slices.Sort(ds)
		mbps[r] = float64(benchJobBytes) / ds[len(ds)/2].Seconds() / 1e6
	}
	b.ReportMetric(mbps[0], name+"-MB/s")
	b.ReportMetric(mbps[1], "cat-MB/s")
	b.ReportMetric(mbps[0]/mbps[1], name+"/cat")
}

// sshCat returns a run of `head -c 256M /dev/zero | cat` in a session of hosts'
// connection to sshtest's host, read to the end.
func sshCat(b *testing.B, hosts *ssh.Hosts) func() {
	c, _, err := hosts.Client(benchCtx(b), sshtest.Alias)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 256<<10)
	return func() {
		sess, err := c.NewSession()
		if err != nil {
			b.Fatal(err)
		}
		defer sess.Close()
		out, err := sess.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := sess.Start(benchJobCommand + " | cat"); err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, out, buf)
		if err != nil || n < benchJobBytes {
			b.Fatalf("read %d bytes: %v", n, err)
		}
		if err := sess.Wait(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSSHJobStart: a job that writes nothing (`true`), from RunJob to its settled
// end, with its output relayed (a session opened per job); BenchmarkSSHJobStartFrames is
// the same through frames (no session): the relay's cost on a job's start.
func BenchmarkSSHJobStart(b *testing.B) {
	s := startJobSession(b, sshtest.Start(b), false, 0)
	benchJobStart(b, s)
}

// BenchmarkSSHJobStartFrames: see BenchmarkSSHJobStart.
func BenchmarkSSHJobStartFrames(b *testing.B) {
	s := startJobSession(b, sshtest.Start(b), false, 0)
	refuseFiles(b, s)
	benchJobStart(b, s)
}

func benchJobStart(b *testing.B, s *controller.Session) {
	settleJob(b, s, "true", time.Minute)
	for b.Loop() {
		if _, st := settleJob(b, s, "true", time.Minute); st.End.ExitCode == nil || *st.End.ExitCode != 0 {
			b.Fatalf("end %+v", st.End)
		}
	}
}
