package docker

import (
	"cmp"
	"context"
	"crypto/rand"
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
)

//go:embed signal.py
var signalSource string

// signalProgram signals every process of an exec-mode kernel in its container (see
// signal.py).
var signalProgram = images.PythonProgram(signalSource)

// startExec runs the stub's bootstrap as an exec in the operator's container. The exec
// carries a run marker of its own (KENNEL_REMOTE_RUN), by which Kill finds the kernel's
// processes inside the container: an exec's pid, as the engine reports it, is a pid of
// the engine's host, which need not be this one.
func (t *Transport) startExec(ctx context.Context, bc bundleCache, spec transports.Spec) (*Kernel, error) {
	python := cmp.Or(spec.Python, "python3")
	run := rand.Text() // the run's marker: 26 random base32 digits
	env := t.env(bc.bundle, spec, run, "")
	created, err := t.cli.ExecCreate(ctx, t.opts.Container, client.ExecCreateOptions{
		User:         t.opts.User,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		Env:          env,
		WorkingDir:   spec.Dir,
		Cmd:          bc.bundle.BootstrapArgv(python),
	})
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", t.opts.Container, classify(err))
	}
	att, err := t.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("start exec in container %s: %w", t.opts.Container, classify(err))
	}
	k := newKernel(transports.Info{Transport: Name, ID: created.ID}, att.HijackedResponse, spec.Stderr)
	// The bundle goes first, before any frame; a kernel that cannot start (no python)
	// may not read it, so a failed write is left for Wait to explain.
	if dl, ok := ctx.Deadline(); ok {
		_ = att.Conn.SetWriteDeadline(dl)
	}
	_, _ = k.stdin.Write(bc.payload)
	_ = att.Conn.SetWriteDeadline(time.Time{})
	// The signal program runs with the kernel's PATH alone (not its marker).
	path := slices.DeleteFunc(env, func(kv string) bool { return !strings.HasPrefix(kv, "PATH=") })
	signal := func(sig string) func() {
		return func() { t.signalRun(python, path, run, sig) }
	}
	k.watchWith(transports.ResolveGrace(t.opts.StdinGrace), transports.WatchSpec{
		Steps: []transports.Step{
			{Act: signal("TERM"), Grace: transports.ResolveGrace(t.opts.StopGrace)},
			{Act: signal("KILL"), Grace: 2 * time.Second},
			// The exec's end shows as its stream's: end the stream, and a Stdout nobody
			// reads, which holds it.
			{Act: func() { k.conn.Close(); k.cut() }},
		},
		Reap: func(seen func() bool) (transports.Exit, error) { return t.reapExec(k, created.ID) },
	})
	return k, nil
}

// signalRun signals every process marked with run in the container (signal.py), by an
// exec of the kernel's interpreter as the kernel's user. It returns once the exec has
// started.
func (t *Transport) signalRun(python string, env []string, run, sig string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created, err := t.cli.ExecCreate(ctx, t.opts.Container, client.ExecCreateOptions{
		User: t.opts.User,
		Env:  env,
		Cmd:  []string{python, "-I", "-S", "-c", signalProgram, run, sig},
	})
	if err != nil {
		return
	}
	_, _ = t.cli.ExecStart(ctx, created.ID, client.ExecStartOptions{Detach: true})
}

// reapExec waits for the exec's stream to end and the engine to report its exit code.
func (t *Transport) reapExec(k *Kernel, execID string) (transports.Exit, error) {
	<-k.demuxDone
	k.conn.Close()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 30*time.Second, fmt.Errorf("exec %.12s still runs after its streams ended", execID))
	defer cancel()
	code, err := execExit(ctx, t.cli, execID)
	return transports.Exit{Code: code}, err
}
