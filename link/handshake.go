package link

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/containerd/errdefs"
)

// Protocol is the protocol number a detached kernel's hello names.
const Protocol = 2

// maxHandshakeLine bounds the hello (and the attach a kernel reads): a hostile kernel
// cannot make the controller buffer more before it has proved anything.
const maxHandshakeLine = 1 << 20

// Errors of the handshake and the link's end.
var (
	// ErrGone: the kernel is proven gone (its attach was refused, or nothing listens at
	// its socket). Only this error licenses ending the kernel's process groups.
	ErrGone = errdefs.ErrNotFound.WithMessage("no kernel there")
	// ErrUnreachable: every try of a reattach failed without proving the kernel gone
	// (a host out of reach is not a kernel gone).
	ErrUnreachable = errdefs.ErrUnavailable.WithMessage("kernel unreachable")
	// ErrBadHello: the kernel's answer to an attach is neither a hello nor a refusal.
	ErrBadHello = errdefs.ErrInvalidArgument.WithMessage("bad hello")
	// ErrDetached: the link was closed on this side; the kernel runs on.
	ErrDetached = errdefs.ErrAborted.WithMessage("detached")
)

// Attach is the controller's first line on every connection.
type Attach struct {
	Kernel string `json:"kernel"`
	Token  string `json:"token"`
	// Ack is the highest kernel seq the controller applied.
	Ack uint64 `json:"ack"`
	// Grace is how long the kernel may stay unattached, in seconds.
	Grace float64 `json:"grace"`
	// Controller names the controller instance (one per Client; at most 128 bytes). When
	// another instance attaches, the kernel answers the host requests it sent and the
	// earlier one never answered with code unknown, and never sends them again.
	Controller string `json:"controller,omitempty"`
	// Heartbeat is how often, in seconds, the controller writes at least a bare ack; the
	// kernel drops a connection it heard nothing on for three of them. Zero: no check.
	Heartbeat float64 `json:"heartbeat,omitempty"`
}

// DefaultHeartbeat is Options.Heartbeat's default: a partitioned connection is taken for
// dead after half a minute of silence, while a controller stalled for a few seconds (a
// GC pause, a busy machine) never is.
const DefaultHeartbeat = 10 * time.Second

// MarshalLine encodes a as {"attach":{...}} and a newline.
func (a Attach) MarshalLine() []byte {
	b, _ := json.Marshal(struct {
		Attach Attach `json:"attach"`
	}{a}) // strings and numbers only: cannot fail
	return append(b, '\n')
}

// GraceSeconds turns d into Attach.Grace.
func GraceSeconds(d time.Duration) float64 { return d.Seconds() }

// Job is a live job a hello names.
type Job struct {
	ID   string `json:"id"`
	PID  int    `json:"pid"`
	PGID int    `json:"pgid"`
}

// Hello is the kernel's answer to an accepted attach.
type Hello struct {
	Protocol int    `json:"protocol"`
	Bundle   string `json:"bundle"`
	Epoch    uint64 `json:"epoch"`
	// Ack is the highest controller seq the kernel applied.
	Ack  uint64 `json:"ack"`
	PID  int    `json:"pid"`
	PGID int    `json:"pgid"`
	// Leader is the kernel's start time in clock ticks since boot (/proc/<pid>/stat
	// field 22): with PID it names the kernel's process and no later one.
	Leader uint64 `json:"leader"`
	Python string `json:"python"`
	// Cells is how many cells run or wait.
	Cells   int    `json:"cells"`
	Jobs    []Job  `json:"jobs"`
	Dropped uint64 `json:"dropped"`
}

// MarshalLine encodes h as {"hello":{...}} and a newline (what a kernel writes).
func (h Hello) MarshalLine() []byte {
	if h.Jobs == nil {
		h.Jobs = []Job{}
	}
	b, err := json.Marshal(struct {
		Hello Hello `json:"hello"`
	}{h})
	if err != nil {
		panic(err) // plain fields only
	}
	return append(b, '\n')
}

// RefusedLine encodes a refusal ({"refused":reason} and a newline).
func RefusedLine(reason string) []byte {
	b, _ := json.Marshal(struct {
		Refused string `json:"refused"`
	}{reason})
	return append(b, '\n')
}

// DecodeAttach reads a controller's attach line (what a kernel does).
func DecodeAttach(line []byte) (Attach, error) {
	var v struct {
		Attach *Attach `json:"attach"`
	}
	if err := strictJSON(line, &v); err != nil || v.Attach == nil {
		return Attach{}, fmt.Errorf("%w: not an attach", errdefs.ErrInvalidArgument)
	}
	a := *v.Attach
	if a.Ack > maxSeq || a.Grace < 0 || math.IsNaN(a.Grace) || a.Grace > 1e9 || len(a.Controller) > 128 ||
		a.Heartbeat < 0 || math.IsNaN(a.Heartbeat) || a.Heartbeat > 1e6 {
		return Attach{}, fmt.Errorf("%w: attach out of range", errdefs.ErrInvalidArgument)
	}
	return a, nil
}

// DecodeReply reads the kernel's answer to an attach: a Hello, or an error wrapping
// ErrGone that carries the kernel's reason for a refusal, or ErrBadHello.
func DecodeReply(line []byte) (Hello, error) {
	var v struct {
		Hello   *Hello  `json:"hello"`
		Refused *string `json:"refused"`
	}
	if err := strictJSON(line, &v); err != nil {
		return Hello{}, fmt.Errorf("%w: %v", ErrBadHello, err)
	}
	switch {
	case v.Refused != nil && v.Hello == nil:
		r := *v.Refused
		if len(r) > 256 {
			r = r[:256]
		}
		return Hello{}, fmt.Errorf("%w: the kernel refused the attach: %q", ErrGone, r)
	case v.Hello != nil && v.Refused == nil:
	default:
		return Hello{}, fmt.Errorf("%w: neither a hello nor a refusal", ErrBadHello)
	}
	h := *v.Hello
	switch {
	case h.Protocol != Protocol:
		return Hello{}, fmt.Errorf("%w: protocol %d, want %d", ErrBadHello, h.Protocol, Protocol)
	case h.Epoch == 0 || h.Ack > maxSeq || h.Dropped > maxSeq:
		return Hello{}, fmt.Errorf("%w: epoch %d, ack %d, dropped %d out of range", ErrBadHello, h.Epoch, h.Ack, h.Dropped)
	case h.PID <= 0 || h.PGID <= 0:
		return Hello{}, fmt.Errorf("%w: pid %d, pgid %d", ErrBadHello, h.PID, h.PGID)
	case len(h.Jobs) > 4096:
		return Hello{}, fmt.Errorf("%w: %d jobs", ErrBadHello, len(h.Jobs))
	}
	for _, j := range h.Jobs {
		if j.PID <= 1 || j.PGID <= 1 || len(j.ID) > 256 {
			return Hello{}, fmt.Errorf("%w: job %q with pid %d, pgid %d", ErrBadHello, j.ID, j.PID, j.PGID)
		}
	}
	return h, nil
}

// strictJSON decodes one JSON object from line, refusing unknown fields and trailing data.
func strictJSON(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the object")
	}
	return nil
}
