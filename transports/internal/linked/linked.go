// Package linked turns a detached kernel's link (link.Client) into the byte streams of a
// transports.Kernel, so the controller speaks protocol 1 to a detached kernel exactly as
// to one over stdio: Stdout begins with a protocol 1 hello made from the link's hello
// (the link checked protocol 2 itself) and carries the kernel's frames, each once;
// Stdin's lines go through the link's outbox, and closing Stdin sends `shutdown` (what
// stdin EOF means to a kernel over stdio) while the link stays up to carry the end.
//
// It also has what every detached kernel over a link has (Kernel), one whose end is a
// transports.Watch's (Detached: local, ssh and the container transports), and for the
// container transports (Docker's run mode, containerd) a kernel's first link (NewRun,
// Open) and how a later controller reaches one again from its record (RunRecord,
// Reattach).
package linked

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/protocol"
)

// HelloLine is the protocol 1 hello of a kernel whose link hello is h, naming the jobs
// it still runs.
func HelloLine(h link.Hello) []byte {
	b, _ := json.Marshal(struct {
		Event    string     `json:"event"`
		ID       string     `json:"id"`
		Protocol int        `json:"protocol"`
		PID      int        `json:"pid"`
		PGID     int        `json:"pgid"`
		Python   string     `json:"python"`
		Bundle   string     `json:"bundle"`
		Jobs     []link.Job `json:"jobs,omitempty"`
	}{"hello", "", protocol.Version, h.PID, h.PGID, h.Python, h.Bundle, h.Jobs})
	return append(b, '\n')
}

// Streams are one linked kernel's Stdin and Stdout.
type Streams struct {
	c      *link.Client
	stdout io.Reader
	stdin  *stdin
}

// New returns c's streams. Stdout ends with io.EOF when the link ends because the kernel
// is gone or the link was detached, and with the link's error otherwise.
func New(c *link.Client) *Streams {
	return &Streams{
		c:      c,
		stdout: io.MultiReader(bytes.NewReader(HelloLine(c.Hello())), frames{c}),
		stdin:  &stdin{c: c},
	}
}

// Stdout is the hello, then the kernel's frames.
func (s *Streams) Stdout() io.Reader { return s.stdout }

// Stdin takes the controller's frames; Close sends shutdown once.
func (s *Streams) Stdin() io.WriteCloser { return s.stdin }

type frames struct{ c *link.Client }

func (f frames) Read(p []byte) (int, error) {
	n, err := f.c.Frames().Read(p)
	if err != nil && (errors.Is(err, link.ErrGone) || errors.Is(err, link.ErrDetached)) {
		err = io.EOF
	}
	return n, err
}

// shutdownLine is the frame a closed Stdin sends.
var shutdownLine = []byte(`{"type":"shutdown","id":""}` + "\n")

type stdin struct {
	c    *link.Client
	once sync.Once
	err  error
}

func (s *stdin) Write(p []byte) (int, error) { return s.c.Send().Write(p) }

func (s *stdin) Close() error {
	s.once.Do(func() {
		_, s.err = s.c.Send().Write(shutdownLine)
	})
	return s.err
}
