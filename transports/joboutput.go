package transports

import (
	"context"
	"io"
)

// JobOutputs is an optional capability of a Kernel (found by type assertion) that can
// carry its jobs' output to the caller as raw bytes beside the frame channel: the
// transport makes a pair of output files where the kernel runs and streams what is
// written to each. The caller asks for one pair per shell job before it sends the job's
// job_run; when OpenJobOutput fails the job's output comes through frames.
//
// It is the last of three ways a shell job's stdout and stderr reach the caller other
// than as frames (job_output, base64 through the kernel's Python). In each the kernel is
// told the files' paths in job_run (docs/protocol.md, "Job output through files"), and the
// caller tries them in this order:
//
//   - Capabilities.SameFS: the caller makes the files on the host and names them by their
//     host paths (a local kernel).
//   - Info.JobOutDir: the caller makes them in Spec.JobOutDir and names them under
//     Info.JobOutDir (a container on this host's kernel, the directory bind-mounted).
//   - JobOutputs: the transport makes them where the kernel is and carries their bytes
//     to the caller itself (a remote host: an ssh session per job).
//
// In every way the bytes never pass through the kernel's Python or the frame channel.
// The files are regular files the job's processes append to: a reader that goes away (a
// controller that is killed) costs the job nothing, and a later reader (the next
// controller, JobOutputRequest.Resume) reads them again from their start. A reader gives
// back the disk of what it consumed past JobOutputRequest.Keep by punching holes; the
// bytes a hole replaced are reported as a Gap, so what was read plus what was lost is
// always exactly what the job wrote.
type JobOutputs interface {
	// OpenJobOutput makes a job's two output files (or, with req.Resume, opens an earlier
	// job's) and the streams that carry them, and returns once the kernel can open them.
	// ctx bounds only the opening; on an error nothing is left (an earlier job's files
	// stay).
	OpenJobOutput(ctx context.Context, req JobOutputRequest) (JobOutput, error)
}

// JobOutputRequest is what OpenJobOutput is asked for.
type JobOutputRequest struct {
	// Keep is how many bytes from each file's start are never punched: what the caller
	// retains of a job's output from its start (its capture's spill limit), so that a
	// later reader finds them again. Bytes past it are punched once streamed (in whole
	// 64 KiB blocks). Zero: nothing is punched.
	Keep int64
	// Resume, when set, names the files of a job an earlier reader made (its Paths):
	// they are opened, not made, and streamed again from their start; a file not there
	// is an error matching errdefs.ErrNotFound.
	Resume [2]string
}

// Gap is a run of a stream's bytes its file no longer holds: after At bytes of the
// stream came N bytes an earlier reader consumed and punched. The stream's reader counts
// them as written and lost.
type Gap struct {
	At, N int64
}

// JobOutput is one job's pair of output files and the streams that carry what is written
// to them. Its methods are safe for concurrent use; each stream is read by one goroutine.
type JobOutput interface {
	// Paths are the files' paths as the kernel opens them: job_run's stdout and stderr.
	Paths() (stdout, stderr string)
	// Stdout and Stderr carry the bytes written to each file, exactly and in order (a
	// Gap aside). Each ends with io.EOF after End once it carried what its file held at
	// End, or, after Close, at once (with io.EOF or another error).
	Stdout() io.Reader
	Stderr() io.Reader
	// Gaps are the streams' gaps (stdout, stderr), known when OpenJobOutput returns:
	// at most one each, and only for a resumed job (a new job's files have none).
	Gaps() [2]*Gap
	// End says the job has ended (its kernel's job_end): each stream ends once it carried
	// what its file holds now, and the files give back their disk then (removed, or
	// punched whole so that a later reader counts every byte as lost). It does not wait;
	// it is idempotent.
	End()
	// Close ends both streams now and keeps the files (for a later reader: the job may run
	// on, its kernel detached). It is idempotent.
	Close() error
}
