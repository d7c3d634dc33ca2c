package docker

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/limits"
)

// createOptions is the container a run-mode kernel gets: the whole lock-down lives here.
func (t *Transport) createOptions(image string, b *images.Bundle, spec transports.Spec) client.ContainerCreateOptions {
	o := t.opts
	labels := o.Controller.Meta(LabelController)
	labels[LabelKennel] = "1"
	labels[LabelSession] = spec.SessionID
	cfg := &container.Config{
		Image:        image,
		User:         o.UserFor(spec.Dir),
		Env:          t.env(b, spec, "", ""),
		WorkingDir:   spec.Dir,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		OpenStdin:    true,
		StdinOnce:    true,
		Labels:       labels,
	}
	if spec.Python != "" {
		cfg.Entrypoint = images.KernelArgv(spec.Python, kernelimage.StubDir)
	}
	network := cmp.Or(o.Network, DefaultNetwork)
	if network == "none" {
		cfg.NetworkDisabled = true
	}
	pids := limits.Of(o.Pids, DefaultPids)
	memory := limits.Of(o.Memory, DefaultMemory)
	init := !o.NoInit
	hc := &container.HostConfig{
		NetworkMode:    container.NetworkMode(network),
		CapDrop:        []string{"ALL"},
		CapAdd:         append([]string(nil), o.CapAdd...),
		ReadonlyRootfs: !o.WritableRootfs,
		Init:           &init,
		Runtime:        o.Runtime,
		SecurityOpt:    append([]string(nil), o.SecurityOpt...),
		Resources: container.Resources{
			Memory:     memory,
			MemorySwap: memory,
			NanoCPUs:   limits.Of(o.NanoCPUs, DefaultNanoCPUs),
			PidsLimit:  &pids,
		},
	}
	if memory == 0 {
		hc.MemorySwap = 0
	}
	if pids == 0 {
		hc.PidsLimit = nil
	}
	if !o.AllowNewPrivileges {
		hc.SecurityOpt = append(hc.SecurityOpt, "no-new-privileges")
	}
	if !o.WritableRootfs {
		hc.Tmpfs = map[string]string{"/tmp": fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", limits.Positive(o.TmpfsSize, DefaultTmpfsSize))}
	}
	for _, m := range o.Mounts {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.Host, Target: m.Sandbox, ReadOnly: m.ReadOnly})
	}
	if m, ok := t.jobOutMount(spec); ok {
		hc.Mounts = append(hc.Mounts, m)
	}
	return client.ContainerCreateOptions{Config: cfg, HostConfig: hc}
}

func (t *Transport) startRun(ctx context.Context, bc bundleCache, spec transports.Spec) (_ *Kernel, err error) {
	image, err := t.Image()
	if err != nil {
		return nil, err
	}
	if _, err := kernelimage.Check(ctx, t.cli, image, bc.bundle); err != nil {
		return nil, err
	}
	opts := t.createOptions(image, bc.bundle, spec)
	id, att, err := t.launch(ctx, opts, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, err
	}
	// Unwind: a start that fails after this leaves no container.
	defer func() {
		if err != nil {
			t.removeSoon(ctx, id)
		}
	}()
	k := newKernel(transports.Info{Transport: Name, ID: id, JobOutDir: jobOutDirOf(opts.HostConfig)}, att.HijackedResponse, spec.Stderr)
	k.watchWith(transports.ResolveGrace(t.opts.StdinGrace), transports.WatchSpec{
		Steps: []transports.Step{
			{Act: func() { k.stopped = true }, Live: true},
			t.stopStep(id),
			// Still not seen to end: an engine holds the container's end back while it
			// cannot write the output nobody reads. Drop the stream, and that Stdout.
			{Act: func() { k.conn.Close(); k.cut() }},
		},
		Reap: func(seen func() bool) (transports.Exit, error) { return t.reap(k, id, seen) },
		Release: func(_ transports.Exit, err error) error {
			// Let the output drain, then remove the container; then Wait returns.
			k.drain(2 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if rerr := remove(ctx, t.cli, id); rerr != nil && err == nil {
				err = rerr
			}
			return err
		},
	})
	return k, nil
}

// launch creates a container from opts, attaches to it with aopts and starts it. On error
// nothing is left: no container, no attached stream.
func (t *Transport) launch(ctx context.Context, opts client.ContainerCreateOptions, aopts client.ContainerAttachOptions) (string, client.ContainerAttachResult, error) {
	created, err := t.cli.ContainerCreate(ctx, opts)
	if err != nil {
		return "", client.ContainerAttachResult{}, fmt.Errorf("create container: %w", classify(err))
	}
	id := created.ID
	att, err := t.cli.ContainerAttach(ctx, id, aopts)
	if err != nil {
		t.removeSoon(ctx, id)
		return "", client.ContainerAttachResult{}, fmt.Errorf("attach container %.12s: %w", id, classify(err))
	}
	if _, err := t.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		att.Close()
		t.removeSoon(ctx, id)
		return "", client.ContainerAttachResult{}, fmt.Errorf("start container %.12s: %w: %w", id, transports.ErrUnavailable, err)
	}
	return id, att, nil
}

// removeSoon removes container id within 30 s, whatever became of ctx.
func (t *Transport) removeSoon(ctx context.Context, id string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = remove(rctx, t.cli, id)
}

// stopStep is Kill's stop stage for container id: ContainerStop, SIGTERM and SIGKILL
// Options.StopGrace (in whole seconds; negative: none) later, then 2 s for its end. The
// stop runs on past the stage.
func (t *Transport) stopStep(id string) transports.Step {
	stop := int(math.Ceil(transports.ResolveGrace(t.opts.StopGrace).Seconds()))
	if t.opts.StopGrace < 0 {
		stop = 0
	}
	return transports.Step{Act: func() {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, _ = t.cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &stop})
		}()
	}, Grace: time.Duration(stop+2) * time.Second}
}

// reap waits for the container to stop and reads how it ended.
func (t *Transport) reap(k *Kernel, id string, seen func() bool) (transports.Exit, error) {
	ctx := context.Background()
	var exit transports.Exit
	var werr error
	w := t.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case r := <-w.Result:
		exit.Code = int(r.StatusCode)
		if r.Error != nil && r.Error.Message != "" {
			werr = fmt.Errorf("wait container %.12s: %s", id, r.Error.Message)
		}
	case err := <-w.Error:
		werr = fmt.Errorf("wait container %.12s: %w", id, err)
	}
	seen()
	stopped := k.stopped
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if ins, err := t.cli.ContainerInspect(ictx, id, client.ContainerInspectOptions{}); err == nil && ins.Container.State != nil {
		exit.Code = ins.Container.State.ExitCode
		exit.OOM = kernelOOM(ins.Container.State.OOMKilled, exit.Code, stopped)
		if ins.Container.State.Running {
			// The wait ended without the container ending (the engine went away): stop it.
			stop := 0
			_, _ = t.cli.ContainerStop(ictx, id, client.ContainerStopOptions{Timeout: &stop})
		}
	} else if err != nil && werr == nil && !cerrdefs.IsNotFound(err) {
		werr = fmt.Errorf("inspect container %.12s: %w", id, err)
	}
	return exit, werr
}

// sigkillCode is the exit code the container reports when its kernel (or, with
// Options.NoInit, its pid 1) was ended by SIGKILL: 128+9.
const sigkillCode = 128 + 9

// kernelOOM tells whether the memory limit ended the kernel itself, from what the engine
// reports and whether Kill's stop stage had been issued before the container ended.
//
// The engine's State.OOMKilled says only that the kernel's OOM killer killed some
// process in the container's cgroup (a cell's child, a job), not which: the engine gets
// an event per cgroup, with no pid. So the kernel's own end is an OOM only when, as
// well, the container ended by SIGKILL (the OOM killer's signal), and not after the stop
// stage, whose SIGKILL reports the same code. A kernel whose child was OOM-killed and
// that then exits by itself (0 at stdin EOF, 143 at SIGTERM, any code but 137) is not.
// A kernel that kills itself with SIGKILL, or exits 137, after a child's OOM kill is
// reported as OOM: nothing tells the two apart.
func kernelOOM(oomKilled bool, code int, stopped bool) bool {
	return oomKilled && code == sigkillCode && !stopped
}

// classify marks engine errors that mean "cannot run here" (no engine, image or network
// missing) as transports.ErrUnavailable.
func classify(err error) error {
	if client.IsErrConnectionFailed(err) || cerrdefs.IsNotFound(err) || cerrdefs.IsUnavailable(err) {
		return fmt.Errorf("%w: %w", transports.ErrUnavailable, err)
	}
	return err
}
