package link

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/containerd/errdefs"
)

// MaxLine bounds one envelope line, its newline included: the protocol's line limit
// (32 MiB) counts the whole envelope.
const MaxLine = 32 << 20

// ErrNotEnvelope: a line after the handshake is not an envelope. It is the link's
// ProtocolFault: the controller drops the connection and reattaches.
var ErrNotEnvelope = errdefs.ErrInvalidArgument.WithMessage("not an envelope")

// maxSeq bounds seq and ack: integers JSON readers in any language carry exactly.
const maxSeq = 1<<53 - 1

// Envelope is one line of the session layer. Frame is the inner protocol 1 frame, byte
// for byte, without its newline; nil for a bare ack (Seq 0).
type Envelope struct {
	Seq   uint64
	Ack   uint64
	Frame []byte
}

// Bare reports whether e is a bare ack (no frame).
func (e Envelope) Bare() bool { return e.Frame == nil }

// Append appends e's line, newline included, to dst: {"seq":n,"ack":m,"frame":F} or
// {"ack":m}. The frame's bytes are copied as they are.
func (e Envelope) Append(dst []byte) []byte {
	if e.Frame == nil {
		dst = append(dst, `{"ack":`...)
		dst = strconv.AppendUint(dst, e.Ack, 10)
		return append(dst, "}\n"...)
	}
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, e.Seq, 10)
	dst = append(dst, `,"ack":`...)
	dst = strconv.AppendUint(dst, e.Ack, 10)
	dst = append(dst, `,"frame":`...)
	dst = append(dst, e.Frame...)
	return append(dst, "}\n"...)
}

// Decode reads one envelope line (its trailing newline optional). It accepts exactly the
// compact form Append writes: keys in that order, no whitespace, seq from 1 and ack
// integers without leading zeros and below 2^53, a frame that begins with '{' and ends
// with '}' (the gate checks the rest of it, as it checks any frame). Anything else is
// ErrNotEnvelope. The returned Frame aliases line.
func Decode(line []byte) (Envelope, error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	if len(line)+1 > MaxLine {
		return Envelope{}, fmt.Errorf("%w: %d bytes, over the %d-byte line limit", ErrNotEnvelope, len(line)+1, MaxLine)
	}
	if rest, ok := bytes.CutPrefix(line, []byte(`{"ack":`)); ok {
		ack, rest, err := number(rest)
		if err != nil || string(rest) != "}" {
			return Envelope{}, notEnvelope(line, "a bare ack is {\"ack\":n}")
		}
		return Envelope{Ack: ack}, nil
	}
	rest, ok := bytes.CutPrefix(line, []byte(`{"seq":`))
	if !ok {
		return Envelope{}, notEnvelope(line, `it starts with neither {"seq": nor {"ack":`)
	}
	seq, rest, err := number(rest)
	if err != nil || seq == 0 {
		return Envelope{}, notEnvelope(line, "seq is not an integer from 1")
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"ack":`)); !ok {
		return Envelope{}, notEnvelope(line, "no ack after seq")
	}
	ack, rest, err := number(rest)
	if err != nil {
		return Envelope{}, notEnvelope(line, "ack is not an integer")
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"frame":`)); !ok {
		return Envelope{}, notEnvelope(line, "no frame after ack")
	}
	frame, ok := bytes.CutSuffix(rest, []byte("}"))
	if !ok || len(frame) < 2 || frame[0] != '{' || frame[len(frame)-1] != '}' {
		return Envelope{}, notEnvelope(line, "the frame is not an object")
	}
	return Envelope{Seq: seq, Ack: ack, Frame: frame}, nil
}

// number reads a decimal integer (no sign, no leading zero, below 2^53) from the start of
// b and returns it and what follows.
func number(b []byte) (uint64, []byte, error) {
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	if n == 0 || n > 16 || (n > 1 && b[0] == '0') {
		return 0, b, ErrNotEnvelope
	}
	v, err := strconv.ParseUint(string(b[:n]), 10, 64)
	if err != nil || v > maxSeq {
		return 0, b, ErrNotEnvelope
	}
	return v, b[n:], nil
}

func notEnvelope(line []byte, why string) error {
	head := line
	if len(head) > 64 {
		head = head[:64]
	}
	return fmt.Errorf("%w: %s (line begins %q)", ErrNotEnvelope, why, head)
}
