package gate

import (
	"github.com/kennel-dev/kennel/protocol"
)

const eventHostRequest = protocol.EventHostRequest

// Frame is an event frame the gate let through (every event but host_request).
type Frame struct {
	// Event is the frame's event, e.g. "stream". Unknown events pass through too.
	Event string
	// ID is the frame's id ("" where the frame names nothing).
	ID string
	// Line is the whole line without its newline. It is valid only during the OnEvent
	// call: the gate reuses the memory; copy what must outlive the call.
	Line []byte
}

// Request is a host request the gate accepted: it is within the line limit, of a type
// Serves reports served, with an id not in use. Exactly one handler must answer it.
type Request struct {
	// ID is the request's id, as decoded from its head. The string is the receiver's
	// to keep.
	ID string
	// Type is the request's type, one Serves reported served.
	Type string
	// Line is the whole line without its newline, a valid JSON object of valid UTF-8.
	// Like Frame.Line it is valid only during the OnRequest call: the gate reuses the
	// memory, so a handler that outlives the call must copy it first.
	Line []byte
}

// Refusal is the one reply the host owes a host request the gate refused. The
// controller writes it as a host_reply with this ID, Status and Code.
type Refusal struct {
	// ID is the request's id, as decoded from its head.
	ID string
	// Status is "error", or "duplicate" when the id was in use.
	Status protocol.ReplyStatus
	// Code is CodeTooLarge, CodeUnserved, CodeNoType or CodeDuplicate.
	Code protocol.Code
	// Message says why, for people.
	Message string
}

// Config holds the gate's callbacks. The gate calls them from Run's goroutine, one at a
// time, in the order of the lines they concern; a callback must not call Run.
type Config struct {
	// Serves reports whether a host request type has a handler. Nil, or a nil OnRequest,
	// means no type is served: every request is refused.
	Serves func(typ string) bool
	// OnRequest receives each accepted request, in order. It must not block: copy
	// Request.Line if the handler needs it, start the handler and return.
	OnRequest func(Request)
	// OnRefusal receives each refusal, in the order decided. Nil drops them (and so
	// breaks the one-reply rule: only tests should leave it nil).
	OnRefusal func(Refusal)
	// OnEvent receives every other event frame, in order. Nil drops them.
	OnEvent func(Frame)
	// OnDiagnostic, when set, receives a message for each oversized stream or display
	// line dropped and each duplicate request refused.
	OnDiagnostic func(msg string)
}

// limits are the numbers the gate enforces; tests shrink them.
type limits struct {
	maxLine  int // largest line, newline included
	headSize int // bytes of a line the head is read from
	idsKept  int // accepted ids remembered
}

func defaultLimits() limits {
	return limits{maxLine: protocol.MaxLine, headSize: protocol.HeadSize, idsKept: protocol.IDsKept}
}

// Gate decides on every frame one kernel writes. A Gate serves one stream: Run may be
// called once.
type Gate struct {
	cfg        Config
	lim        limits
	ids        *idSet
	val        validator
	heads      headScanner
	types      map[string]string // interned request types, bounded by maxTypes
	lastType   string            // the type interned last
	recent     [4]string         // event ids handed out lately, reused to spare allocations
	nextRecent int
	ran        bool
}

// maxTypes bounds the interned type names, so a kernel inventing types cannot grow it.
const maxTypes = 64

// New returns a gate with cfg's callbacks and the limits of docs/protocol.md.
func New(cfg Config) *Gate { return newGate(cfg, defaultLimits()) }

func newGate(cfg Config, lim limits) *Gate {
	lim.headSize = min(lim.headSize, lim.maxLine)
	if cfg.OnRequest == nil {
		cfg.Serves = nil
	}
	return &Gate{cfg: cfg, lim: lim, ids: newIDSet(lim.idsKept), types: make(map[string]string)}
}
