package docker

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
)

// startExec runs the stub's bootstrap as an exec in the operator's container.
func (t *Transport) startExec(ctx context.Context, bc bundleCache, spec transports.Spec) (*Kernel, error) {
	python := spec.Python
	if python == "" {
		python = "python3"
	}
	env := kernelEnv(t.defaultEnv(bc.bundle), append(append([]string(nil), spec.Env...), images.EnvOwner+"=stdin"))
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
	k := newKernel(transports.Info{Transport: Name, ID: created.ID}, att.HijackedResponse, spec.Stderr, transports.ResolveGrace(t.opts.StdinGrace))
	// The bundle goes first, before any frame; a kernel that cannot start (no python)
	// may not read it, so a failed write is left for Wait to explain.
	if dl, ok := ctx.Deadline(); ok {
		_ = att.Conn.SetWriteDeadline(dl)
	}
	_, _ = k.stdin.Write(bc.payload)
	_ = att.Conn.SetWriteDeadline(time.Time{})
	execID := created.ID
	term := transports.ResolveGrace(t.opts.StopGrace)
	k.escalate = func(ctx context.Context) {
		// No engine call ends an exec: signal its process on the engine's host (where the
		// controller runs beside a local engine); a remote engine's exec ends when its
		// stdin closes, or with its container.
		ins, err := t.cli.ExecInspect(ctx, execID, client.ExecInspectOptions{})
		if err != nil || !ins.Running || ins.PID <= 0 {
			k.conn.Close()
			return
		}
		_ = syscall.Kill(ins.PID, syscall.SIGTERM)
		tm := time.NewTimer(term)
		defer tm.Stop()
		select {
		case <-k.demuxDone:
			return
		case <-tm.C:
		}
		_ = syscall.Kill(ins.PID, syscall.SIGKILL)
		tm2 := time.NewTimer(2 * time.Second)
		defer tm2.Stop()
		select {
		case <-k.demuxDone:
		case <-tm2.C:
			k.conn.Close()
		}
	}
	go t.reapExec(k, execID)
	return k, nil
}

// reapExec waits for the exec's stream to end and the engine to report its exit code.
func (t *Transport) reapExec(k *Kernel, execID string) {
	<-k.demuxDone
	k.conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		ins, err := t.cli.ExecInspect(ctx, execID, client.ExecInspectOptions{})
		if err != nil {
			k.finish(transports.Exit{Code: -1}, fmt.Errorf("inspect exec %.12s: %w", execID, err))
			return
		}
		if !ins.Running {
			k.finish(transports.Exit{Code: ins.ExitCode}, nil)
			return
		}
		select {
		case <-ctx.Done():
			k.finish(transports.Exit{Code: -1}, fmt.Errorf("exec %.12s still runs after its streams ended", execID))
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}
