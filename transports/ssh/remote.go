package ssh

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	xssh "golang.org/x/crypto/ssh"
)

// sentinel is the line every remote command prints on its real stdout before its own
// output: what a login profile printed earlier is skipped up to it.
const sentinel = "--kennel-remote/1 ready--"

// maxPreamble bounds what is skipped before the sentinel.
const maxPreamble = 1 << 20

// shQuote quotes s for a POSIX shell as one word.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// loginCommand is the complete remote command line that runs script (POSIX sh) through
// the user's login shell: the outer /bin/sh keeps the real stdout on fd 3 and gives the
// login shell stderr as its stdout, so whatever the profile prints goes to stderr; the
// script gets the real stdout back, prints the sentinel and runs. The result is a fixed
// string for a fixed script: inputs travel on stdin.
func loginCommand(script string) string {
	inner := "exec 1>&3 3>&-; printf '%s\\n' '" + sentinel + "'; " + script
	login := `exec 3>&1 1>&2; exec "${SHELL:-/bin/sh}" -l -c ` + shQuote(inner)
	return "/bin/sh -c " + shQuote(login)
}

// sentinelReader passes r through from the line after the sentinel on. It ends with
// io.EOF if r ends first (the command failed before its output), and with an error if
// more than maxPreamble bytes come first.
type sentinelReader struct {
	r     *bufio.Reader
	found bool
	err   error
}

func newSentinelReader(r io.Reader) *sentinelReader {
	return &sentinelReader{r: bufio.NewReaderSize(r, 64<<10)}
}

func (s *sentinelReader) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if !s.found {
		if err := s.skip(); err != nil {
			s.err = err
			return 0, err
		}
	}
	return s.r.Read(p)
}

func (s *sentinelReader) skip() error {
	skipped := 0
	for skipped <= maxPreamble {
		line, err := s.r.ReadSlice('\n')
		skipped += len(line)
		// A profile line without its newline may stand before the sentinel.
		if err == nil && bytes.HasSuffix(line, []byte(sentinel+"\n")) {
			s.found = true
			return nil
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
	return fmt.Errorf("remote command printed over %d bytes before its output", maxPreamble)
}

// boundedBuffer keeps the first limit bytes written to it (and counts the rest).
type boundedBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	limit int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.limit - b.b.Len(); room > 0 {
		b.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// runRemote runs script on c with stdin and returns its stdout after the sentinel (at
// most limit bytes). A non-zero exit is an ErrRemote error carrying what the command said
// on stderr; a failed or dropped connection is ErrUnreachable. ctx ends the command (its
// channel is closed).
func runRemote(ctx context.Context, c *xssh.Client, what, script string, stdin io.Reader, limit int) ([]byte, error) {
	sess, err := c.NewSession()
	if err != nil {
		return nil, fmt.Errorf("%s: open session: %w: %w", what, err, ErrUnreachable)
	}
	defer sess.Close()
	stderr := &boundedBuffer{limit: 8 << 10}
	sess.Stderr = stderr
	sess.Stdin = stdin
	out, err := sess.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := sess.Start(loginCommand(script)); err != nil {
		return nil, fmt.Errorf("%s: start: %w: %w", what, err, ErrUnreachable)
	}
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	stdout := &boundedBuffer{limit: limit}
	_, copyErr := io.Copy(stdout, newSentinelReader(out))
	werr := sess.Wait()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s: %w", what, context.Cause(ctx))
	}
	var ee *xssh.ExitError
	switch {
	case errors.As(werr, &ee):
		return nil, fmt.Errorf("%s: %w: %s: %w", what, exitStatus(ee.ExitStatus()), lastLines(stderr.String(), 3), ErrRemote)
	case werr != nil:
		return nil, fmt.Errorf("%s: %w: %w", what, werr, ErrUnreachable)
	case copyErr != nil && !errors.Is(copyErr, io.EOF):
		return nil, fmt.Errorf("%s: %w: %w", what, copyErr, ErrRemote)
	}
	return []byte(stdout.String()), nil
}

// exitStatus is a remote command's non-zero exit status, within a runRemote error.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// lastLines returns the last n non-empty lines of s, joined by "; ".
func lastLines(s string, n int) string {
	var lines []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return "(no message)"
	}
	return strings.Join(lines[max(0, len(lines)-n):], "; ")
}
