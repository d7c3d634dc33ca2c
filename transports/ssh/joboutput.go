package ssh

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"

	xssh "golang.org/x/crypto/ssh"

	"github.com/kennel-dev/kennel/transports"
)

// Job output over ssh: a channel of its own per job (transports.JobOutputs). The
// controller opens a session on the kernel's connection running jobOutputScript, which
// makes the job's two FIFOs in the kernel's run directory (0700, the user's), opens their
// read ends and a write end of each of its own, says "ready", and relays each FIFO with
// cat to one of the session's streams: the job's stdout as the channel's data, its
// stderr as its extended data (each in order; ssh keeps them apart). The kernel opens
// the FIFOs by path (job_run) and gives them to the job: the bytes go job, FIFO, cat,
// sshd, the wire, this process, and never through the kernel's Python or the frame
// channel.
//
// Release is a line on the session's stdin: the script closes its own write ends and
// removes the paths, and each stream ends once the job's writers closed it. Close is the
// stdin's EOF: the relay's process group (the session's own: sshd makes each session's
// command a session leader) is killed, so its streams end at once even while a stray
// process holds a FIFO (sshd keeps a session open while its command runs), and then the
// session is closed. The relay carries the kernel's run marker (KENNEL_REMOTE_RUN), so
// the kernel's end sweeps a relay too, with the run directory.
//
// Each job holds one session of the connection while it runs: a host's sshd bounds the
// sessions of a connection (MaxSessions, 10 by default, the kernel's own included), and a
// job that finds none free gets its output through frames.

// jobOutputScript is the relay's fixed command; on stdin, one a line: the run directory,
// the run id, the FIFOs' name. Its stderr begins with the sentinel too (after what the
// login profile printed there), its stdout with the sentinel and "ready".
var jobOutputScript = `IFS= read -r dir || exit 2
IFS= read -r run || exit 2
IFS= read -r name || exit 2
case "$run" in ''|.*|*[!A-Za-z0-9._-]*) exit 2 ;; esac
case "$name" in ''|*[!A-Za-z0-9_-]*) exit 2 ;; esac
case "$dir" in /*) ;; *) exit 2 ;; esac
export KENNEL_REMOTE_RUN="$run"
out="$dir/$name-stdout" err="$dir/$name-stderr"
umask 077
mkfifo "$out" "$err" || exit 3
exec 4<>"$out" 5<>"$err" 6<"$out" 7<"$err" || exit 3
printf '%s\n' '` + sentinel + `' >&2
printf 'ready\n'
cat <&6 4>&- 5>&- 6<&- 7<&- &
o=$!
cat <&7 >&2 4>&- 5>&- 6<&- 7<&- &
e=$!
exec 6<&- 7<&- 8<&0
IFS= read -r _ || :
exec 4>&- 5>&-
rm -f "$out" "$err"
{ IFS= read -r _ <&8; kill -KILL 0; } </dev/null >/dev/null 2>&1 4>&- 5>&- &
w=$!
exec 8<&-
wait "$o" "$e"
kill "$w" 2>/dev/null
`

// OpenJobOutput makes a job's FIFOs in the kernel's run directory and a session relaying
// them (see the package's job output notes); it returns once the relay is ready. An
// error (no session to be had: the connection is lost, or sshd's MaxSessions reached)
// leaves nothing; the job's output then goes through frames.
func (k *Kernel) OpenJobOutput(ctx context.Context) (transports.JobOutput, error) {
	return openRelay(ctx, k.conn.c, k.cfg.target, k.cfg.runDir, k.cfg.runID)
}

// OpenJobOutput is Kernel.OpenJobOutput for a detached kernel, on its host's connection.
func (k *detachedKernel) OpenJobOutput(ctx context.Context) (transports.JobOutput, error) {
	c, err := k.t.hosts.clientFor(ctx, k.target)
	if err != nil {
		return nil, err
	}
	return openRelay(ctx, c, k.target, k.rec.RunDir, k.runID)
}

var (
	_ transports.JobOutputs = (*Kernel)(nil)
	_ transports.JobOutputs = (*detachedKernel)(nil)
)

// relay is one job's FIFOs on the host and the session carrying them.
type relay struct {
	sess           *xssh.Session
	stdin          io.WriteCloser
	paths          [2]string
	stdout, stderr io.Reader

	releaseOnce, closeOnce sync.Once
}

func openRelay(ctx context.Context, c *xssh.Client, target Target, runDir, runID string) (_ *relay, err error) {
	if runDir == "" {
		return nil, fmt.Errorf("job output relay on %s: no run directory", target)
	}
	var rnd [16]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	name := "kennel-fifo-" + hex.EncodeToString(rnd[:])
	sess, err := c.NewSession()
	if err != nil {
		return nil, fmt.Errorf("job output relay on %s: open session: %w: %w", target, err, ErrUnreachable)
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
		return nil, fmt.Errorf("job output relay on %s: start: %w: %w", target, err, ErrUnreachable)
	}
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	if _, err := io.WriteString(stdin, runDir+"\n"+runID+"\n"+name+"\n"); err != nil {
		return nil, fmt.Errorf("job output relay on %s: %w: %w", target, err, ErrUnreachable)
	}
	out := newSentinelReader(stdout)
	errs := newSentinelReader(stderr)
	// The profile's stderr must be read past while stdout waits for ready: the two
	// share the channel's window.
	errSkipped := make(chan error, 1)
	go func() { errSkipped <- errs.skip() }()
	if err := readReady(out); err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return nil, fmt.Errorf("job output relay on %s: %w", target, err)
	}
	if err := <-errSkipped; err != nil {
		return nil, fmt.Errorf("job output relay on %s: stderr: %w", target, err)
	}
	base := path.Join(runDir, name)
	return &relay{
		sess: sess, stdin: stdin,
		paths:  [2]string{base + "-stdout", base + "-stderr"},
		stdout: out, stderr: errs,
	}, nil
}

// readReady reads r past the sentinel and the relay's "ready" line, no further.
func readReady(r *sentinelReader) error {
	if err := r.skip(); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("the relay ended before it was ready (no FIFOs made)")
		}
		return err
	}
	line, err := r.r.ReadSlice('\n')
	if err != nil || !bytes.Equal(line, []byte("ready\n")) {
		return fmt.Errorf("the relay said %q, not ready: %v", strings.TrimSpace(string(line)), err)
	}
	return nil
}

// Paths are the FIFOs in the kernel's run directory.
func (r *relay) Paths() (string, string) { return r.paths[0], r.paths[1] }

// Stdout is the relay session's stdout from the job's first byte on.
func (r *relay) Stdout() io.Reader { return r.stdout }

// Stderr is the relay session's stderr from the job's first byte on.
func (r *relay) Stderr() io.Reader { return r.stderr }

// Release sends the relay a line: it closes its own write ends and removes the FIFOs'
// paths.
func (r *relay) Release() {
	r.releaseOnce.Do(func() { _, _ = io.WriteString(r.stdin, "\n") })
}

// Close sends the relay its stdin EOF, which kills it, and closes its session: both
// streams end once sshd has seen the relay's end (or the connection ends).
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
