package ssh

import (
	"archive/tar"
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kennel-dev/kennel/images"
)

//go:embed stage.py
var stageSource string

// stageScript is the staging command: the interpreter's path on stdin's first line, then
// the stage program's input (see stage.py).
var stageScript = `IFS= read -r py || exit 2
exec "$py" -I -S -c ` + shQuote(images.PythonProgram(stageSource))

// bundleTar returns the bundle's files as a tar stream.
func bundleTar(b *images.Bundle) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range b.Files() {
		parts := strings.Split(f.Path, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/")
			if !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o700, ModTime: time.Unix(0, 0)}); err != nil {
					return nil, err
				}
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.Path, Mode: 0o600, Size: int64(len(f.Data)), ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// StageResult says what Stage did.
type StageResult struct {
	// Dir is the bundle's directory on the host (absolute).
	Dir string
	// Sent reports that the bundle travelled in this call; false when it was staged
	// already (known from the probe, or found by the staging command).
	Sent bool
}

// Stage makes sure the embedded stub bundle is staged on target at
// ~/.kennel-remote/<hash>/, sending it as a tar over the shared connection when the
// probe says it is not there. A bundle is sent at most once per Hosts while it stays
// staged; concurrent callers for one host share one staging. A host that is not ready
// fails with the probe's error.
func (h *Hosts) Stage(ctx context.Context, target string) (StageResult, error) {
	b, err := images.Stub()
	if err != nil {
		return StageResult{}, err
	}
	res, _, err := h.stage(ctx, target, b)
	return res, err
}

// stage is Stage for bundle b; it also returns the ready probe it went by (Staged as the
// probe found it), so a caller needs no second probe.
func (h *Hosts) stage(ctx context.Context, target string, b *images.Bundle) (StageResult, Probe, error) {
	p := h.probeBundle(ctx, target, b.Hash())
	if p.Status != StatusReady {
		return StageResult{}, p, fmt.Errorf("stage bundle on %s: %w", target, p.Err)
	}
	dir := p.Home + "/.kennel-remote/" + b.Hash()
	if p.Staged {
		return StageResult{Dir: dir}, p, nil
	}
	t, err := h.res.resolve(target)
	if err != nil {
		return StageResult{}, p, err
	}
	ch := h.stages.DoChan(t.Key()+" "+b.Hash(), func() (any, error) {
		c, err := h.clientFor(ctx, t)
		if err != nil {
			return false, err
		}
		payload, err := bundleTar(b)
		if err != nil {
			return false, fmt.Errorf("stage bundle on %s: %w", t, err)
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		in := io.MultiReader(strings.NewReader(p.PythonPath+"\n"+b.Hash()+"\n"), bytes.NewReader(payload))
		out, err := runRemote(sctx, c, "stage bundle on "+t.String(), stageScript, in, 4096)
		if err != nil {
			return false, err
		}
		h.markStaged(t, b.Hash())
		return strings.TrimSpace(string(out)) == "staged", nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return StageResult{}, p, r.Err
		}
		return StageResult{Dir: dir, Sent: r.Val.(bool)}, p, nil
	case <-ctx.Done():
		return StageResult{}, p, fmt.Errorf("stage bundle on %s: %w", t, context.Cause(ctx))
	}
}
