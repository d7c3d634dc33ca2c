package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
	"github.com/kennel-dev/kennel/transports/internal/limits"
)

// bridged is how the transport reaches the detached kernel of pod: every bridge is an exec
// of python in the pod's container, as the pod's user, with the container's environment
// (PATH, HOME, LANG: podSpec).
func (t *Transport) bridged(pod, python string) kernelstart.Bridged {
	return kernelstart.Bridged{
		Transport:  Name,
		Run:        t.execRunner(pod),
		Python:     python,
		Root:       RunRoot,
		Where:      t.ns + "/" + pod,
		Grace:      limits.Positive(t.opts.KernelGrace, DefaultKernelGrace),
		StdinGrace: transports.ResolveGrace(t.opts.StdinGrace),
		TermGrace:  transports.ResolveGrace(t.opts.StopGrace),
	}
}

// execRunner runs commands as execs in pod. A pod that is gone, ended or being deleted is
// link.ErrGone: its kernel has ended (or is ending) with it.
func (t *Transport) execRunner(pod string) kernelstart.Runner {
	return func(ctx context.Context, argv []string, stderr io.Writer) (kernelstart.Proc, error) {
		if err := t.podLive(ctx, pod); err != nil {
			return nil, err
		}
		return t.cli.startExec(t.ns, pod, argv, stderr)
	}
}

// podLive checks that pod runs: gone, ended or being deleted is link.ErrGone, an API
// server out of reach transports.ErrUnavailable.
func (t *Transport) podLive(ctx context.Context, pod string) error {
	p, err := t.pods().Get(ctx, pod, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("pod %s/%s: %w: it is gone", t.ns, pod, link.ErrGone)
	case err != nil:
		return fmt.Errorf("pod %s/%s: %w", t.ns, pod, classify(err))
	case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		return fmt.Errorf("pod %s/%s: %w: it has ended (%s)", t.ns, pod, link.ErrGone, p.Status.Phase)
	case p.DeletionTimestamp != nil:
		return fmt.Errorf("pod %s/%s: %w: it is being deleted", t.ns, pod, link.ErrGone)
	}
	return nil
}

// startDetached starts a detached kernel in pod, which runs: an exec of the start program
// with the bridge before it reads the start block (Spec.Dir, the kernel's environment,
// its run directory under RunRoot) and the token from its stdin, forks the kernel and
// relays its stream to the kernel's socket: the link's first connection. Later
// connections, signals and the run directory's removal are execs of the bridge.
func (t *Transport) startDetached(ctx context.Context, pod *corev1.Pod, spec transports.Spec, python string) (*detachedKernel, error) {
	id, token := make([]byte, 8), make([]byte, 32)
	_, _ = rand.Read(id) // never fails
	_, _ = rand.Read(token)
	b := t.bridged(pod.Name, python)
	rec := transports.Record{Kernel: hex.EncodeToString(id), Token: hex.EncodeToString(token)}
	rec.RunDir = b.RunDir(rec.Kernel)
	block, err := kernelstart.Block{Dir: spec.Dir, Run: rec.RunDir, Stub: kernelimage.StubDir, Env: t.kernelEnv(rec.RunDir).Build(spec.Env)}.Encode()
	if err != nil {
		return nil, err
	}
	preamble := append(block, rec.Token+"\n"...)
	argv := detachedArgv(python)
	first, err := kernelstart.OpenBridge(ctx, b.Run, "start", argv, preamble, spec.Stderr)
	if err != nil {
		if context.Cause(ctx) == nil && !errdefs.IsUnavailable(err) {
			// The start command could not run or ended before it connected (no such
			// interpreter, no stub): no kernel can start here so.
			err = fmt.Errorf("%w: %w", transports.ErrUnavailable, err)
		}
		return nil, fmt.Errorf("start detached kernel in pod %s/%s: %w", t.ns, pod.Name, err)
	}
	bk, err := b.Start(ctx, first, rec)
	if err != nil {
		return nil, err
	}
	return newDetachedKernel(t, pod.Name, bk), nil
}

// detachedArgv is the start exec of a detached kernel (a pool's too): python running the
// start program with the bridge before it, then the stub's boot program.
func detachedArgv(python string) []string {
	return []string{python, "-I", "-S", "-c", kernelstart.DetachedProgram(kernelstart.BootProgram())}
}

// kernelEnv is the environment rule of the transport's kernels (Env.Build): PATH, HOME and
// LANG first, the stub's defaults, the session's entries, then the transport's own; with
// runDir, a detached kernel's, whose run directory it is.
func (t *Transport) kernelEnv(runDir string) kernelstart.Env {
	return kernelstart.Env{
		Base:     []string{"PATH=" + kernelstart.DefaultPath, "HOME=/tmp", "LANG=C.UTF-8"},
		Stub:     images.KernelEnv(t.bundle),
		EOFGrace: t.opts.EOFGrace,
		Detached: runDir,
	}
}

// Reattach reaches the detached kernel rec names again (transports.Reattacher): an exec
// of the bridge's attach in its pod (rec.Where, "namespace/pod"), resuming after
// rec.Applied. A record that is not this transport's, names another namespace or a pod
// that is not a detached kernel's, is refused (errdefs.ErrInvalidArgument). A kernel
// proven gone (its pod gone, ended or being deleted, no kernel at its run directory) is
// an error matching errdefs.ErrNotFound, and its pod is removed; an API server out of
// reach is errdefs.ErrUnavailable. ctx bounds only the attach.
func (t *Transport) Reattach(ctx context.Context, rec transports.Record) (transports.Kernel, error) {
	ns, pod, ok := strings.Cut(rec.Where, "/")
	if rec.Transport != Name || !ok || ns != t.ns || pod == "" {
		return nil, fmt.Errorf("reattach kubernetes kernel %q: record of %q at %q: not a pod of namespace %s: %w", rec.Kernel, rec.Transport, rec.Where, t.ns, errdefs.ErrInvalidArgument)
	}
	p, err := t.pods().Get(ctx, pod, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("reattach kubernetes kernel %s: pod %s: %w", rec.Kernel, rec.Where, classify(err))
	case p.Labels[LabelKennel] != "1" || p.Labels[LabelDetached] != "1":
		return nil, fmt.Errorf("reattach kubernetes kernel %s: pod %s is no detached kernel's: %w", rec.Kernel, rec.Where, errdefs.ErrInvalidArgument)
	}
	bk, err := t.bridged(pod, "python3").Reattach(ctx, rec)
	if err != nil {
		if errdefs.IsNotFound(err) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
			_ = t.removePod(rctx, pod, 1)
			cancel()
		}
		return nil, err
	}
	return newDetachedKernel(t, pod, bk), nil
}

// detachedKernel is a detached kernel in a pod of its own: the bridged kernel, whose pod
// is removed once the kernel is proven gone.
type detachedKernel struct {
	*kernelstart.BridgedKernel
	ended chan struct{} // closed once exit is known, before the pod's removal
	done  chan struct{} // closed once Wait's result is final
	exit  transports.Exit
	err   error
	t     *Transport
	pod   string
}

var (
	_ transports.Detachable = (*detachedKernel)(nil)
	_ transports.Ender      = (*detachedKernel)(nil)
)

// Ended is closed once the kernel's end is known, before its pod's removal
// (transports.Ender).
func (k *detachedKernel) Ended() <-chan struct{} { return k.ended }

// Exit returns how the kernel ended, once Ended is closed (transports.Ender).
func (k *detachedKernel) Exit() transports.Exit {
	<-k.ended
	return k.exit
}

func newDetachedKernel(t *Transport, pod string, bk *kernelstart.BridgedKernel) *detachedKernel {
	k := &detachedKernel{BridgedKernel: bk, ended: make(chan struct{}), done: make(chan struct{}), t: t, pod: pod}
	go func() {
		k.exit, k.err = bk.Wait()
		close(k.ended)
		if !errors.Is(k.err, link.ErrDetached) && !errors.Is(k.err, link.ErrUnreachable) && !errdefs.IsUnavailable(k.err) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			if err := t.removePod(ctx, pod, 1); err != nil && k.err == nil {
				k.err = err
			}
			cancel()
		}
		close(k.done)
	}()
	return k
}

// Wait is the bridged kernel's (kernelstart.BridgedKernel.Wait), once a kernel proven gone
// has had its pod and NetworkPolicy removed; a kernel let go (Detach) or out of reach keeps
// its pod.
func (k *detachedKernel) Wait() (transports.Exit, error) {
	<-k.done
	return k.exit, k.err
}

// Kill is the bridged kernel's (kernelstart.BridgedKernel.Kill: shutdown over the link,
// then TERM and KILL of its group by the signal bridge), then the pod's removal. It
// returns once Wait's result is final, or ctx ends.
func (k *detachedKernel) Kill(ctx context.Context) error {
	select {
	case <-k.done:
		return nil // the end is confirmed, whatever ctx says
	default:
	}
	if err := k.BridgedKernel.Kill(ctx); err != nil {
		return err
	}
	select {
	case <-k.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kill kubernetes kernel %s: remove its pod: %w", k.Info().ID, context.Cause(ctx))
	}
}
