package wrapped

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"time"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// DefaultKernelGrace is how long a detached kernel lives with nothing attached when
// Options.KernelGrace is zero.
const DefaultKernelGrace = time.Hour

var _ transports.Reattacher = (*Transport)(nil)

// bridged is how this transport reaches its detached kernels: every bridge runs under
// the wrapper, with python.
func (t *Transport) bridged(python string) kernelstart.Bridged {
	prefix := append([]string(nil), t.opts.ArgvPrefix...)
	if !t.opts.InheritWrapperEnv {
		prefix = append(prefix, "env", "-i", "PATH="+DefaultPath)
	}
	grace := t.opts.KernelGrace
	if grace <= 0 {
		grace = DefaultKernelGrace
	}
	return kernelstart.Bridged{
		Transport:  Name,
		Run:        runner(0),
		Prefix:     prefix,
		Python:     python,
		Root:       t.opts.RunDir,
		Grace:      grace,
		StdinGrace: transports.ResolveGrace(t.opts.StdinGrace),
		TermGrace:  transports.ResolveGrace(t.opts.TermGrace),
	}
}

// startDetached runs the kernel command with the bridge before the start program: the
// command forks the kernel (KENNEL_KERNEL_RUN, a run directory under Options.RunDir),
// and once the kernel's socket answers it relays its stdio to it. That is the link's first
// connection; later ones are attach bridges.
func (t *Transport) startDetached(ctx context.Context, bc bundleCache, spec transports.Spec, python string) (transports.Kernel, error) {
	id, token := make([]byte, 8), make([]byte, 32)
	_, _ = rand.Read(id) // never fails
	_, _ = rand.Read(token)
	b := t.bridged(python)
	rec := transports.Record{Kernel: hex.EncodeToString(id), Token: hex.EncodeToString(token)}
	rec.RunDir = b.RunDir(rec.Kernel)
	argv, preamble, err := t.plan(bc, spec, python, rec.RunDir)
	if err != nil {
		return nil, err
	}
	preamble = append(preamble, rec.Token+"\n"...)
	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = b.Cleanup(cctx, rec.RunDir) // a kernel that started ends within a second
	}
	first, err := kernelstart.OpenBridge(ctx, runner(len(preamble)), "start", argv, preamble, spec.Stderr)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("start detached kernel %s: %w", rec.Kernel, err)
	}
	k, err := b.Start(ctx, first, rec)
	if err != nil {
		cleanup()
		return nil, err
	}
	return k, nil
}

// Reattach reaches a detached kernel again from its record, through an attach bridge run
// under this transport's wrapper (with Options.Python): what a controller started after
// the one that started the kernel does. The record's run directory must be a child of
// Options.RunDir (errdefs.ErrInvalidArgument otherwise). A kernel proven gone is an
// error matching errdefs.ErrNotFound: no kernel at the run directory (its run directory
// is then removed), or a refused attach (a wrong token: nothing is touched). A wrapper
// that cannot run, or a sandbox out of reach, is errdefs.ErrUnavailable after the
// protocol's backoff, or ctx's end. ctx bounds only the attach.
func (t *Transport) Reattach(ctx context.Context, rec transports.Record) (transports.Kernel, error) {
	python := cmp.Or(t.opts.Python, "python3")
	if err := transports.CheckPython("Options.Python", python); err != nil {
		return nil, fmt.Errorf("reattach wrapped kernel %q: %w", rec.Kernel, err)
	}
	if len(t.opts.ArgvPrefix) > 0 {
		if _, err := exec.LookPath(t.opts.ArgvPrefix[0]); err != nil {
			return nil, fmt.Errorf("reattach wrapped kernel %q: wrapper %q: %w: %w", rec.Kernel, t.opts.ArgvPrefix[0], transports.ErrUnavailable, err)
		}
	}
	k, err := t.bridged(python).Reattach(ctx, rec)
	if err != nil {
		return nil, err
	}
	return k, nil
}

// ErrKilledOutside is what Wait reports for a detached kernel that was killed, neither by
// Kill nor ending by itself (it left its socket behind): most often a wrapper whose pid
// namespace ends with its first command (see the package doc, "Detached kernels"). It
// matches errdefs.ErrAborted.
var ErrKilledOutside = kernelstart.ErrKilledOutside
