package kubernetes

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// Kernel is a kernel running as an exec in a pod of its own. It is single use and safe
// for concurrent use; see transports.Kernel.
type Kernel struct {
	t      *Transport
	pod    string
	info   transports.Info
	stdin  *kernelstart.Stdin
	stdout *kernelstart.CutReader
	watch  *transports.Watch

	// stopped is set when Kill deleted the pod before the kernel's end was seen (its
	// end by the kubelet's SIGKILL then is no OOM). A Live rung sets it, so it is final
	// once the reap has seen the end.
	stopped bool
}

var _ transports.Kernel = (*Kernel)(nil)

// sigkillCode is the exit status an exec reports for a process ended by SIGKILL: 128+9.
const sigkillCode = 128 + 9

// oomCheckTimeout bounds the whole of oomKilled: a read of the pod, the probe's exec (at
// most 10 s) and the wait for the container's end (oomStatusWait).
const oomCheckTimeout = 20 * time.Second

func newKernel(t *Transport, pod *corev1.Pod, s *execStream) *Kernel {
	k := &Kernel{
		t:      t,
		pod:    pod.Name,
		info:   transports.Info{Transport: Name, ID: t.ns + "/" + pod.Name},
		stdin:  kernelstart.NewStdin(s, s.CloseWrite),
		stdout: kernelstart.NewCutReader(s, s.cut),
	}
	stop := transports.ResolveGrace(t.opts.StopGrace)
	k.watch = transports.NewWatch(transports.WatchSpec{
		What: "kubernetes kernel " + k.info.ID,
		Steps: []transports.Step{
			{Act: func() { _ = s.CloseWrite() }, Grace: transports.ResolveGrace(t.opts.StdinGrace)},
			// The pod's deletion TERMs its main process, which passes the TERM on to the
			// kernel; the kubelet kills what is left once the grace is over.
			{Act: func() { k.stopped = true; k.deletePod(t.opts.stopSeconds()) }, Live: true, Grace: stop + 2*time.Second},
			{Act: func() { k.deletePod(0) }, Grace: 5 * time.Second},
			// Still not seen to end: a stream that cannot deliver output nobody reads.
			{Act: func() { s.Close(); k.stdout.Cut() }},
		},
		Reap: func(seen func() bool) (transports.Exit, error) {
			<-s.Done()
			killed := seen()
			code, err := s.result()
			exit := transports.Exit{Code: code}
			switch {
			case err != nil && killed:
				// Kill's end: the stream broke as the pod went, which is that end.
				err = nil
			case err != nil:
				err = fmt.Errorf("exec stream of kernel %s: %w", k.info.ID, err)
			}
			if code == sigkillCode && !k.stopped {
				ctx, cancel := context.WithTimeout(context.Background(), oomCheckTimeout)
				exit.OOM = k.oomKilled(ctx)
				cancel()
			}
			return exit, err
		},
		Release: func(_ transports.Exit, err error) error {
			k.stdout.Drain(2 * time.Second)
			s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if rerr := t.removePod(ctx, k.pod, 1); rerr != nil && err == nil {
				err = rerr
			}
			return err
		},
	})
	return k
}

// deletePod deletes the kernel's pod with a grace of grace seconds (0: by force).
func (k *Kernel) deletePod(grace int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = k.t.deletePod(ctx, k.pod, grace)
}

// oomStatusWait bounds how long oomKilled waits for the kubelet to report the end of a
// container it can no longer ask (see oomKilled). A variable for tests.
var oomStatusWait = 5 * time.Second

// oomKilled reports whether the pod's memory limit killed a process of its container. It
// is asked only when the kernel ended by SIGKILL (137) before Kill deleted its pod, and
// answers from the first of:
//
//   - the container's terminated state, when the pod's status has it: OOMKilled (its main
//     process was the victim, or the runtime kills the whole container on an OOM);
//   - the count of OOM kills of its memory cgroup, when the container still runs: read by
//     an exec of the image's python (/sys/fs/cgroup/memory.events, or memory.oom_control
//     under cgroup v1);
//   - else the container is ending and cannot be asked (an OOM that took its main process
//     or the whole container ends it at once), and the kubelet reports that end only after
//     its next look at the runtime (about a second, more on a loaded node): oomKilled
//     watches the pod for the container's terminated state, up to oomStatusWait, and
//     answers OOMKilled or not. A pod deleted meanwhile, or no state within the bound, is
//     no OOM.
//
// So an ordinary end by SIGKILL (a cell that kills its own kernel) costs one read of the
// pod and one exec, and only an end the container did not survive waits for the kubelet.
// ctx bounds it all.
func (k *Kernel) oomKilled(ctx context.Context) bool {
	p, err := k.t.pods().Get(ctx, k.pod, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false // deleted by another than Kill: no state to read
	case err != nil:
		p = nil // the watch below reads it again
	default:
		if ended, oom := containerEnded(p); ended {
			return oom
		}
	}
	if n, ok := k.probeOOM(ctx); ok {
		return n > 0
	}
	wctx, cancel := context.WithTimeout(ctx, oomStatusWait)
	defer cancel()
	oom := false
	_ = k.t.watchPod(wctx, k.pod, p, func(p *corev1.Pod) (bool, error) {
		if p == nil {
			return true, nil
		}
		ended, o := containerEnded(p)
		oom = o
		return ended, nil
	})
	return oom
}

// containerEnded reads pod p's status: whether its kernel container has ended (or the pod
// has), and whether it ended OOMKilled.
func containerEnded(p *corev1.Pod) (ended, oom bool) {
	for _, cs := range p.Status.ContainerStatuses {
		if x := cs.State.Terminated; cs.Name == Container && x != nil {
			return true, x.Reason == "OOMKilled"
		}
	}
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return true, false
	}
	return false, false
}

// probeOOM runs oomProbe in the kernel's container: the OOM kills its memory cgroup
// counts (-1: it cannot tell), and whether it answered at all (a container that has ended
// or is ending cannot run it).
func (k *Kernel) probeOOM(ctx context.Context) (int, bool) {
	s, err := k.t.cli.startExec(k.t.ns, k.pod, []string{"python3", "-I", "-S", "-c", oomProbe}, nil)
	if err != nil {
		return 0, false
	}
	defer s.Close()
	_ = s.CloseWrite()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = s.SetReadDeadline(time.Now()) })
	defer stop()
	out, _ := io.ReadAll(io.LimitReader(s, 64))
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	return n, err == nil
}

// oomProbe prints the OOM kills its memory cgroup counts (-1 when it cannot tell).
const oomProbe = `import re
n = -1
for p in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
    try:
        m = re.search(r"^oom_kill (\d+)$", open(p).read(), re.M)
    except OSError:
        continue
    if m:
        n = int(m.group(1))
        break
print(n)`

// Stdin is the kernel's standard input, the exec's stdin. Close ends it: the stream carries
// the end and the kernel reads EOF (the stub then shuts down).
func (k *Kernel) Stdin() io.WriteCloser { return k.stdin }

// Stdout is the kernel's standard output, the exec's stdout. What the kernel still wrote
// when it has ended and nobody read within 2 s is dropped, as it is when Kill's last
// stage comes, and Stdout ends with EOF: an unread Stdout never keeps Kill or Wait from
// returning. A Stdout left unread for about a minute while the kernel writes stalls the
// stream's heartbeat, and client-go then ends the stream (the kernel reads EOF).
func (k *Kernel) Stdout() io.Reader { return k.stdout }

// Info says Transport "kubernetes", no host pids, and ID "namespace/pod".
func (k *Kernel) Info() transports.Info { return k.info }

// Wait blocks until the kernel's exec has ended and its pod and NetworkPolicy are deleted.
// Code is the exec's exit status (128+N after signal N); -1 with an error when the stream
// ended without one (the connection to the API server broke: the kernel read EOF and
// ended). Exit.OOM reports that the memory limit ended the kernel itself: it ended by
// SIGKILL (137) before Kill deleted its pod, and the container was OOMKilled or its memory
// cgroup counts an OOM kill (a cell's child killed by the limit earlier counts too). When
// that end took the container with it (its status not yet showing, its cgroup no longer
// readable), Wait first waits up to 5 s for the kubelet to report the container's end
// (see oomKilled); other ends never wait for it.
// Exit.Killed reports that Kill ran before the end. Later calls return the same.
func (k *Kernel) Wait() (transports.Exit, error) { return k.watch.Wait() }

// Ended is closed once the kernel's end is known, before its release (transports.Ender).
func (k *Kernel) Ended() <-chan struct{} { return k.watch.Ended() }

// Exit returns how the kernel ended, once Ended is closed (transports.Ender).
func (k *Kernel) Exit() transports.Exit { return k.watch.Exit() }

// Kill ends the kernel in stages: close stdin and wait Options.StdinGrace for the stub to
// exit; delete the pod with its grace (Options.StopGrace: the TERM reaches the kernel, the
// kubelet kills at the grace's end) and wait that grace and 2 s; delete it by force and
// wait 5 s; last, end the stream and cut Stdout. Then the pod and its NetworkPolicy are
// deleted. It returns once the end is confirmed (Wait's result is set). The stages run
// once, whoever calls Kill and however often; if ctx ends first, Kill returns ctx's cause
// and the stages go on.
func (k *Kernel) Kill(ctx context.Context) error { return k.watch.Kill(ctx) }
