package gate

import (
	"errors"
	"fmt"
)

// ErrProtocolFault is matched by every *ProtocolFault under errors.Is.
var ErrProtocolFault = errors.New("protocol fault")

// ProtocolFault is a line the host cannot answer (docs/protocol.md, the gate, rule 6):
// not UTF-8, not one JSON object, no "event" and "id" first in its head, over the line
// limit without a host-request or stream/display head, or cut off by the end of the stream.
// After a fault the gate has decided nothing about the line or any line after it; the
// controller replaces the kernel.
type ProtocolFault struct {
	// Reason says what is wrong, for people; it is not matched.
	Reason string
	// Offset is the byte offset of the line's first byte in the stream.
	Offset int64
	// Head holds the line's first bytes, at most 256, copied.
	Head []byte
}

// Error reports the reason, the offset and the line's first bytes, quoted.
func (f *ProtocolFault) Error() string {
	return fmt.Sprintf("protocol fault at byte %d: %s (line begins %q)", f.Offset, f.Reason, f.Head)
}

// Is reports target == ErrProtocolFault.
func (f *ProtocolFault) Is(target error) bool { return target == ErrProtocolFault }

// maxFaultHead bounds ProtocolFault.Head.
const maxFaultHead = 256

func newFault(reason string, offset int64, line []byte) *ProtocolFault {
	n := min(len(line), maxFaultHead)
	return &ProtocolFault{Reason: reason, Offset: offset, Head: append([]byte(nil), line[:n]...)}
}

// Fault reasons.
const (
	reasonUTF8      = "line is not valid UTF-8"
	reasonNotObject = "line is not one JSON object"
	reasonEmpty     = "empty line"
	reasonDepth     = "line nests deeper than 10000"
	reasonDupKey    = "line has \"event\", \"id\" or \"type\" twice"
	reasonOversized = "line over the limit without a host_request, stream or display head"
	reasonCut       = "stream ended inside a line (no newline)"
)
