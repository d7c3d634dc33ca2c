package kernelstart

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// PipeReader reads a kernel's output pipe (its stdout, its stderr) until EOF, or, once
// Cut, until the pipe holds no more bytes; it closes the pipe at its first error (EOF
// included), so a caller that reads to the end releases the descriptor, and returns that
// error from then on. One goroutine reads at a time; Cut may be called from any
// goroutine.
type PipeReader struct {
	f      *os.File
	err    error
	isCut  atomic.Bool
	closed atomic.Bool
}

// NewPipeReader returns a PipeReader of f, the read end of a pipe.
func NewPipeReader(f *os.File) *PipeReader { return &PipeReader{f: f} }

// Read reads from the pipe (see PipeReader).
func (r *PipeReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if !r.isCut.Load() {
		n, err := r.f.Read(p)
		if err == nil || !r.isCut.Load() || !errors.Is(err, os.ErrDeadlineExceeded) {
			return r.result(n, err)
		}
	}
	return r.result(r.readNow(p))
}

// readNow reads what the pipe holds without waiting: io.EOF when it holds nothing.
func (r *PipeReader) readNow(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	rc, err := r.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	// Cut sets a read deadline once, to wake a blocked Read; clear it (again, if cut
	// set it after the first clear) so the raw read runs.
	for range 3 {
		_ = r.f.SetReadDeadline(time.Time{})
		var n int
		var rerr error
		err = rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), p)
			return true
		})
		if errors.Is(err, os.ErrDeadlineExceeded) || (err == nil && rerr == unix.EINTR) {
			continue
		}
		switch {
		case err != nil:
			return 0, err
		case rerr == unix.EAGAIN, rerr == nil && n <= 0:
			return 0, io.EOF
		case rerr != nil:
			return 0, rerr
		}
		return n, nil
	}
	return 0, io.EOF
}

func (r *PipeReader) result(n int, err error) (int, error) {
	if err != nil {
		r.err = err
		r.closed.Store(true)
		r.f.Close()
	}
	return n, err
}

// Cut makes the reader end with EOF as soon as the pipe holds no more bytes (what a
// process out of the host's reach still writes is not waited for), waking a Read that
// waits.
func (r *PipeReader) Cut() {
	r.isCut.Store(true)
	if !r.closed.Load() {
		_ = r.f.SetReadDeadline(time.Now())
	}
}
