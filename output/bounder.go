package output

import (
	"bytes"
	"fmt"
	"os"

	"github.com/containerd/errdefs"
)

// ErrClosed is returned by writes to a Bounder whose Result was taken, or to a Capture
// that was closed.
var ErrClosed = errdefs.ErrFailedPrecondition.WithMessage("output closed")

// BounderOptions configure a Bounder.
type BounderOptions struct {
	// ArtifactDir is a private directory (see PrepareDir) where the full output goes once
	// it passes the bound, in a 0600 file named kennel-output-*. Empty: no artifact; the
	// dropped bytes are only counted.
	ArtifactDir string
}

// Bounder bounds one streaming output: Write it chunk by chunk, then take Result. The
// window and counts equal Bound of the whole text, whatever the chunking. Memory stays
// within about 2*(Bytes+1) for a tail and Bytes+1 for a head, whatever is written; Off
// keeps every byte. A Bounder is not safe for concurrent use: one writer, or a caller
// that serializes.
type Bounder struct {
	off bool
	lim Limits

	buf []byte // head: the first bytes; tail: the last bytes; off: all

	total    int64
	newlines int64
	last     byte

	dir     string
	art     *os.File
	artPath string
	artErr  error

	final *Result
}

// NewBounder returns a Bounder for t. It refuses an invalid t (ErrInvalidLimits) and an
// artifact directory that is not private (ErrNotPrivate); it creates no file until the
// output passes the bound.
func NewBounder(t Truncation, opts BounderOptions) (*Bounder, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("new bounder: %w", err)
	}
	if opts.ArtifactDir != "" && !t.IsOff() {
		if err := checkPrivateDir(opts.ArtifactDir); err != nil {
			return nil, fmt.Errorf("new bounder: %w", err)
		}
	}
	return &Bounder{off: t.IsOff(), lim: t.Limits(), dir: opts.ArtifactDir}, nil
}

// keepN is how many bytes the window can come from.
func (b *Bounder) keepN() int64 { return b.lim.Bytes + 1 }

func (b *Bounder) lines() int64 {
	if b.total > 0 && b.last != '\n' {
		return b.newlines + 1
	}
	return b.newlines
}

// over reports whether the output so far passes the bound.
func (b *Bounder) over() bool {
	return !b.off && (b.total > b.lim.Bytes || b.lines() > b.lim.Lines)
}

// Write counts p, stores what the window may need and, past the bound, appends p to the
// artifact. It always consumes all of p and returns len(p), nil, except after Result
// (0, ErrClosed). An artifact failure is reported in the Result, never here.
func (b *Bounder) Write(p []byte) (int, error) {
	if b.final != nil {
		return 0, fmt.Errorf("write output: %w", ErrClosed)
	}
	if len(p) == 0 {
		return 0, nil
	}
	wasOver := b.over()
	b.total += int64(len(p))
	b.newlines += int64(countNewlines(p))
	b.last = p[len(p)-1]
	if !wasOver && b.over() && b.dir != "" {
		// Everything before p fit, so buf holds all of it.
		b.openArtifact()
	}
	b.writeArtifact(p)
	b.store(p)
	return len(p), nil
}

func (b *Bounder) store(p []byte) {
	switch {
	case b.off:
		b.buf = append(b.buf, p...)
	case b.lim.Keep == Head:
		if room := b.keepN() - int64(len(b.buf)); room > 0 {
			b.buf = append(b.buf, p[:min(int64(len(p)), room)]...)
		}
	default:
		n := b.keepN()
		if int64(len(p)) >= n {
			b.buf = append(b.buf[:0], p[int64(len(p))-n:]...)
			return
		}
		b.buf = append(b.buf, p...)
		if int64(len(b.buf)) > 2*n {
			drop := int64(len(b.buf)) - n
			b.buf = b.buf[:copy(b.buf, b.buf[drop:])]
		}
	}
}

func (b *Bounder) openArtifact() {
	f, err := os.CreateTemp(b.dir, "kennel-output-*")
	if err != nil {
		b.artErr = fmt.Errorf("create artifact: %w", err)
		return
	}
	b.art, b.artPath = f, f.Name()
	b.writeArtifact(b.buf)
}

func (b *Bounder) writeArtifact(p []byte) {
	if b.art == nil {
		return
	}
	if _, err := b.art.Write(p); err != nil {
		b.artErr = fmt.Errorf("write artifact %s: %w", b.artPath, err)
		_ = b.art.Close()
		_ = os.Remove(b.artPath)
		b.art, b.artPath = nil, ""
	}
}

// Snapshot returns the window and counts of the output so far, as if it ended now. It
// does not close the Bounder; later writes go on.
func (b *Bounder) Snapshot() Result {
	if b.final != nil {
		return b.final.clone()
	}
	return b.result()
}

func (b *Bounder) result() Result {
	r := Result{Off: b.off, TotalBytes: b.total, TotalLines: b.lines(), Where: b.artPath, ArtifactErr: b.artErr}
	if b.off {
		r.fill(b.buf, true)
		return r
	}
	view := b.buf // a head's first bytes; a tail's last (buf ends where the output does)
	if b.lim.Keep == Tail && int64(len(view)) > b.keepN() {
		view = view[int64(len(view))-b.keepN():]
	}
	r.fillWindow(view, int64(len(view)) == b.total, b.lim)
	return r
}

// Result ends the output and returns its window, counts and artifact. The artifact (if
// any) is complete and closed when Result returns; an error closing it is in
// ArtifactErr. Later calls return the same Result; later writes fail with ErrClosed.
func (b *Bounder) Result() Result {
	if b.final != nil {
		return b.final.clone()
	}
	if b.art != nil {
		if err := b.art.Close(); err != nil {
			b.artErr = fmt.Errorf("close artifact %s: %w", b.artPath, err)
			_ = os.Remove(b.artPath)
			b.artPath = ""
		}
		b.art = nil
	}
	r := b.result()
	b.final = &r
	b.buf = nil
	return r.clone()
}

func countNewlines(p []byte) int { return bytes.Count(p, []byte{'\n'}) }
