package ssh

import (
	"cmp"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	xssh "golang.org/x/crypto/ssh"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
)

// Job output over ssh: a session of its own per job (transports.JobOutputs). The
// controller opens a session on the kernel's connection running jobOutputScript, which
// runs the relay (relay.py) with the kernel's interpreter: it makes the job's two output
// files in the kernel's run directory (regular files, 0600; or, for a resumed job, opens
// an earlier relay's), says "ready" with the files' gaps, and streams each file as it
// grows to one of the session's streams: the job's stdout as the channel's data, its
// stderr as its extended data (each in order; ssh keeps them apart). The kernel opens
// the files by path (job_run, O_WRONLY|O_APPEND) and gives them to the job: the bytes go
// job, file, relay, sshd, the wire, this process, and never through the kernel's Python
// or the frame channel.
//
// The files outlive their reader: a relay whose controller is gone (killed: its
// connection ends, and sshd gives the relay its stdin's EOF) exits and leaves them, and
// the job writes on (a file has no reader to lose, so no SIGPIPE). A later controller
// opens a new relay on them (JobOutputRequest.Resume), which streams them again from
// their start. Past JobOutputRequest.Keep the relay punches what it streamed (whole
// 64 KiB blocks, fallocate PUNCH_HOLE), so a job's output costs the disk about Keep
// plus what is not streamed yet; a resumed relay reports the hole as its stream's Gap.
// One relay reads a pair at a time (flock): a resume waits while an earlier relay holds
// the files, so no hole is punched under a reader after it computed its gap.
//
// End is a line on the session's stdin: the relay streams each file to its end, gives
// back all of its disk (one hole the file's length: the name and size stay, so a relay
// after it, of a controller that died before it recorded the job's end, counts the
// job's every byte as lost, never twice; where nothing can be punched it removes the
// files) and exits. Close is the stdin's EOF: the relay exits at once (it starts no
// process), the files kept, and then the session is closed. The relay carries the
// kernel's run marker (KENNEL_REMOTE_RUN), so the kernel's end sweeps a relay too, with
// the run directory and the files in it.
//
// Each job holds one session of the connection while it is streamed: a host's sshd
// bounds the sessions of a connection (MaxSessions, 10 by default, the kernel's own
// included), and a job that finds none free gets its output through frames.

//go:embed relay.py
var relaySource string

// jobOutputScript is the relay's fixed command; on stdin, one a line: the interpreter's
// path, the run id, then relay.py's lines (the run directory, Keep, "new" or "resume",
// the two files' paths). Its stderr begins with the sentinel too (after what the login
// profile printed there), its stdout with the sentinel and "ready" (after "busy" while
// an earlier relay holds the files).
var jobOutputScript = readRun + `printf '%s\n' '` + sentinel + `' >&2
exec "$py" -I -S -c ` + shQuote(images.PythonProgram(relaySource))

// The relay's exit statuses before it is ready.
const (
	relayRefused  = 2 // a bad line, a path not of the run directory, not a regular file
	relayNotFound = 4 // a resumed file is gone
)

// relayWaitExit bounds how long a relay that ended before it was ready is waited for, to
// read its exit status.
const relayWaitExit = 5 * time.Second

// OpenJobOutput makes a job's output files in the kernel's run directory (or, with
// req.Resume, opens an earlier job's there) and a session streaming them (see the
// package's job output notes); it returns once the relay is ready. An error leaves
// nothing (a resumed job's files stay): no session to be had (the connection lost, or
// sshd's MaxSessions reached) is ErrUnreachable, a resumed file that is gone
// errdefs.ErrNotFound, Resume paths that are not a pair of this kernel's job output
// files errdefs.ErrInvalidArgument (the files are not touched).
func (k *Kernel) OpenJobOutput(ctx context.Context, req transports.JobOutputRequest) (transports.JobOutput, error) {
	return openRelay(ctx, k.conn.c, relayAt{k.cfg.target, k.cfg.python, k.cfg.runDir, k.cfg.runID}, req)
}

// OpenJobOutput is Kernel.OpenJobOutput for a detached kernel, on its host's current
// connection.
func (k *detachedKernel) OpenJobOutput(ctx context.Context, req transports.JobOutputRequest) (transports.JobOutput, error) {
	c, err := k.t.hosts.clientFor(ctx, k.target)
	if err != nil {
		return nil, fmt.Errorf("job output relay on %s: %w", k.target, err)
	}
	return openRelay(ctx, c, relayAt{k.target, k.python, k.runDir, k.runID}, req)
}

var (
	_ transports.JobOutputs = (*Kernel)(nil)
	_ transports.JobOutputs = (*detachedKernel)(nil)
)

// relayAt is where a kernel's relays run: its host, the probe's interpreter (python3
// when none is known), its run directory and run id.
type relayAt struct {
	target                Target
	python, runDir, runID string
}

// relay is one job's output files on the host and the session carrying them.
type relay struct {
	sess           *xssh.Session
	stdin          io.WriteCloser
	paths          [2]string
	gaps           [2]*transports.Gap
	stdout, stderr io.Reader

	endOnce, closeOnce sync.Once
}

func openRelay(ctx context.Context, c *xssh.Client, at relayAt, req transports.JobOutputRequest) (_ *relay, err error) {
	what := "job output relay on " + at.target.String()
	if at.runDir == "" {
		return nil, fmt.Errorf("%s: no run directory", what)
	}
	mode, paths := "new", req.Resume
	if paths != [2]string{} {
		mode = "resume"
		for _, p := range paths {
			if p == "" || strings.ContainsAny(p, "\n\x00") {
				return nil, fmt.Errorf("%s: resume %q: not a pair of paths: %w", what, paths, errdefs.ErrInvalidArgument)
			}
		}
	} else {
		var rnd [16]byte
		_, _ = rand.Read(rnd[:]) // never fails
		base := path.Join(at.runDir, "kennel-out-"+hex.EncodeToString(rnd[:]))
		paths = [2]string{base + "-stdout", base + "-stderr"}
	}
	if req.Keep < 0 {
		return nil, fmt.Errorf("%s: keep %d: %w", what, req.Keep, errdefs.ErrInvalidArgument)
	}
	sess, err := c.NewSession()
	if err != nil {
		return nil, fmt.Errorf("%s: open session: %w: %w", what, err, ErrUnreachable)
	}
	defer func() {
		if err != nil {
			sess.Close()
		}
	}()
	stdin, err := sess.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := sess.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := sess.Start(loginCommand(jobOutputScript)); err != nil {
		return nil, fmt.Errorf("%s: start: %w: %w", what, err, ErrUnreachable)
	}
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	in := strings.Join([]string{cmp.Or(at.python, "python3"), at.runID, at.runDir,
		strconv.FormatInt(req.Keep, 10), mode, paths[0], paths[1]}, "\n") + "\n"
	if _, err := io.WriteString(stdin, in); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", what, err, ErrUnreachable)
	}
	out := newSentinelReader(stdout)
	errs := newSentinelReader(stderr)
	// The profile's stderr must be read past while stdout waits for ready: the two
	// share the channel's window.
	errSkipped := make(chan error, 1)
	go func() { errSkipped <- errs.skip() }()
	gaps, busy, err := readReady(out)
	if err != nil {
		switch {
		case ctx.Err() != nil && busy:
			err = fmt.Errorf("%w: another relay still holds the files (an earlier controller's, its end not seen by the host yet): %w", context.Cause(ctx), errdefs.ErrUnavailable)
		case ctx.Err() != nil:
			err = context.Cause(ctx)
		default:
			err = relayExit(sess, err)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := <-errSkipped; err != nil {
		return nil, fmt.Errorf("%s: stderr: %w", what, err)
	}
	return &relay{sess: sess, stdin: stdin, paths: paths, gaps: gaps, stdout: out, stderr: errs}, nil
}

// relayExit classes err, why a relay was not ready, by the relay's exit status.
func relayExit(sess *xssh.Session, err error) error {
	werr := make(chan error, 1)
	go func() { werr <- sess.Wait() }()
	t := time.NewTimer(relayWaitExit)
	defer t.Stop()
	var ee *xssh.ExitError
	select {
	case w := <-werr:
		if !errors.As(w, &ee) {
			return fmt.Errorf("%w: %w", err, ErrUnreachable)
		}
	case <-t.C:
		return err
	}
	switch ee.ExitStatus() {
	case relayRefused:
		return fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	case relayNotFound:
		return fmt.Errorf("%w: %w", err, errdefs.ErrNotFound)
	case 126, 127:
		return fmt.Errorf("%w (exit status %d: no such interpreter): %w", err, ee.ExitStatus(), ErrUnsupported)
	}
	return fmt.Errorf("%w (exit status %d): %w", err, ee.ExitStatus(), ErrRemote)
}

// readReady reads r past the sentinel and the relay's "ready" line, no further, and
// returns the gaps it names; busy reports a "busy" line before (the relay waited for
// another).
func readReady(r *sentinelReader) (gaps [2]*transports.Gap, busy bool, _ error) {
	if err := r.skip(); err != nil {
		if errors.Is(err, io.EOF) {
			return gaps, false, errors.New("the relay ended before it was ready (no files opened)")
		}
		return gaps, false, err
	}
	for {
		line, err := r.r.ReadSlice('\n')
		if err == nil && string(line) == "busy\n" {
			busy = true
			continue
		}
		f := strings.Fields(string(line))
		var n [4]int64
		ok := err == nil && len(f) == 5 && f[0] == "ready"
		for i := 0; ok && i < 4; i++ {
			n[i], err = strconv.ParseInt(f[i+1], 10, 64)
			ok = err == nil && n[i] >= 0
		}
		if !ok {
			if errors.Is(err, io.EOF) && len(line) == 0 {
				return gaps, busy, errors.New("the relay ended before it was ready")
			}
			return gaps, busy, fmt.Errorf("the relay said %q, not ready", strings.TrimSpace(string(line)))
		}
		for i := range gaps {
			if n[2*i+1] > 0 {
				gaps[i] = &transports.Gap{At: n[2*i], N: n[2*i+1]}
			}
		}
		return gaps, busy, nil
	}
}

// Paths are the files in the kernel's run directory.
func (r *relay) Paths() (string, string) { return r.paths[0], r.paths[1] }

// Stdout is the relay session's stdout from the stdout file's first byte on.
func (r *relay) Stdout() io.Reader { return r.stdout }

// Stderr is the relay session's stderr from the stderr file's first byte on.
func (r *relay) Stderr() io.Reader { return r.stderr }

// Gaps are the holes the relay found in a resumed job's files, as it said when ready.
func (r *relay) Gaps() [2]*transports.Gap { return r.gaps }

// End sends the relay the line "end": it streams each file to its end, punches all of
// it, and exits, which ends the streams.
func (r *relay) End() {
	r.endOnce.Do(func() { _, _ = io.WriteString(r.stdin, "end\n") })
}

// Close sends the relay its stdin EOF, which ends it (the files kept), and closes its
// session: both streams end once sshd has seen the relay's end (or the connection ends).
func (r *relay) Close() error {
	r.closeOnce.Do(func() {
		_ = r.stdin.Close()
		go func() {
			// sshd ends the session once the relay is gone; this close is for a host
			// that never answers (the connection's end then ends the streams).
			_ = r.sess.Wait()
			_ = r.sess.Close()
		}()
	})
	return nil
}
