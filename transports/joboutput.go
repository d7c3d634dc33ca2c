package transports

import (
	"context"
	"io"
)

// JobOutputs is an optional capability of a Kernel (found by type assertion) that can
// carry its jobs' output to the caller as raw bytes beside the frame channel: the
// transport makes a pair of FIFOs where the kernel runs and streams what is written to
// each. The caller asks for one pair per shell job before it sends the job's job_run;
// when OpenJobOutput fails the job's output comes through frames.
//
// It is the last of three ways a shell job's stdout and stderr reach the caller other
// than as frames (job_output, base64 through the kernel's Python). In each the kernel is
// told the FIFOs' paths in job_run (docs/protocol.md, "Job output through FIFOs"), and the
// caller tries them in this order:
//
//   - Capabilities.SameFS: the caller makes the FIFOs on the host and names them by their
//     host paths (a local kernel).
//   - Info.FIFODir: the caller makes them in Spec.FIFODir and names them under
//     Info.FIFODir (a container on this host's kernel, the directory bind-mounted).
//   - JobOutputs: the transport makes them where the kernel is and carries their bytes
//     to the caller itself (a remote host: an ssh session per job).
//
// In every way the bytes never pass through the kernel's Python or the frame channel, and
// a FIFO nobody reads is refused by the kernel at once (it opens with O_NONBLOCK), so a
// path the kernel cannot reach costs a fallback to frames, never a hang.
type JobOutputs interface {
	// OpenJobOutput makes a job's two FIFOs, opens their read ends and holds a write end
	// of each (so that neither stream ends before the kernel has opened its ends), and
	// returns once the kernel could open them. ctx bounds only the opening; on an error
	// nothing is left.
	OpenJobOutput(ctx context.Context) (JobOutput, error)
}

// JobOutput is one job's pair of output FIFOs and the streams that carry what is written
// to them. Its methods are safe for concurrent use; each stream is read by one goroutine.
type JobOutput interface {
	// Paths are the FIFOs' paths as the kernel opens them: job_run's stdout and stderr.
	Paths() (stdout, stderr string)
	// Stdout and Stderr carry the bytes written to each FIFO, exactly and in order. Each
	// ends with io.EOF once Release was called and every writer of its FIFO closed it,
	// or, after Close, at once (with io.EOF or another error).
	Stdout() io.Reader
	Stderr() io.Reader
	// Release drops the transport's own write ends and the FIFOs' paths: the kernel has
	// opened its ends (job_start), or never will (job_end). It does not wait; it is
	// idempotent.
	Release()
	// Close ends both streams now, whoever still holds a FIFO (the bytes read before
	// stay read), and releases what the pair holds. It is idempotent.
	Close() error
}
