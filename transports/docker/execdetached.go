package docker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
	"github.com/kennel-dev/kennel/transports/internal/limits"
)

// bridged is how exec mode reaches its detached kernels in container: every bridge is an
// exec of python there, as the Options' user, with PATH alone.
func (t *Transport) bridged(container, python string) kernelstart.Bridged {
	return kernelstart.Bridged{
		Transport:  Name,
		Run:        t.execRunner(container, []string{"PATH=" + kernelstart.DefaultPath}),
		Python:     python,
		Root:       t.opts.RunDir,
		Where:      container,
		Grace:      limits.Positive(t.opts.KernelGrace, DefaultKernelGrace),
		StdinGrace: transports.ResolveGrace(t.opts.StdinGrace),
		TermGrace:  transports.ResolveGrace(t.opts.StopGrace),
	}
}

// startExecDetached runs a detached kernel in the operator's container: an exec of the
// start program with the bridge before it reads the start block (Spec.Dir, the kernel's
// environment, its run directory under Options.RunDir), the bundle and the token from
// its stdin, forks the kernel and relays its attached stream to the kernel's socket: the
// link's first connection. Later connections, signals and the run directory's removal
// are execs of the bridge.
func (t *Transport) startExecDetached(ctx context.Context, bc bundleCache, spec transports.Spec) (transports.Kernel, error) {
	python := cmp.Or(spec.Python, "python3")
	id, token := make([]byte, 8), make([]byte, 32)
	_, _ = rand.Read(id) // never fails
	_, _ = rand.Read(token)
	b := t.bridged(t.opts.Container, python)
	rec := transports.Record{Kernel: hex.EncodeToString(id), Token: hex.EncodeToString(token)}
	rec.RunDir = b.RunDir(rec.Kernel)
	block, err := kernelstart.Block{Dir: spec.Dir, Run: rec.RunDir, Env: t.env(bc.bundle, spec, "", rec.RunDir)}.Encode()
	if err != nil {
		return nil, err
	}
	preamble := append(append(block, bc.payload...), rec.Token+"\n"...)
	// The interpreter's own environment: fixed, non-secret entries; the start program
	// replaces it with the block's.
	startEnv := append([]string{"PATH=" + kernelstart.DefaultPath}, images.KernelEnv(bc.bundle)...)
	argv := []string{python, "-I", "-S", "-c", kernelstart.DetachedProgram(images.BootstrapProgram()), bc.bundle.Hash()}
	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = b.Cleanup(cctx, rec.RunDir) // a kernel that started ends within a second
	}
	first, err := kernelstart.OpenBridge(ctx, t.execRunner(t.opts.Container, startEnv), "start", argv, preamble, spec.Stderr)
	if err != nil {
		if errors.Is(err, link.ErrGone) {
			return nil, fmt.Errorf("start detached kernel in container %s: %w: %w", t.opts.Container, transports.ErrUnavailable, err)
		}
		cleanup()
		return nil, fmt.Errorf("start detached kernel in container %s: %w", t.opts.Container, err)
	}
	k, err := b.Start(ctx, first, rec)
	if err != nil {
		cleanup()
		return nil, err
	}
	return k, nil
}
