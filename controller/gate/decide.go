package gate

import (
	"fmt"
	"unicode/utf8"

	"github.com/kennel-dev/kennel/protocol"
)

// line decides on one complete line within the limit (without its newline) that starts
// at offset in the stream. It returns a *ProtocolFault or nil.
func (g *Gate) line(line []byte, offset int64) error {
	switch v := g.val.object(line); {
	case v == vNotObject && len(line) == 0:
		return newFault(reasonEmpty, offset, line)
	case v == vNotObject && !utf8.Valid(line):
		return newFault(reasonUTF8, offset, line)
	case v != vOK:
		return newFault(verdictReasons[v], offset, line)
	}
	hd := g.heads.fromMembers(line, g.val.members[:g.val.n], g.lim.headSize)
	if !hd.ok {
		return newFault(hd.why, offset, line)
	}
	if string(hd.event) != eventHostRequest {
		if g.cfg.OnEvent != nil {
			g.cfg.OnEvent(Frame{Event: eventName(hd.event), ID: g.eventID(hd.id), Line: line})
		}
		return nil
	}
	h, inUse := g.ids.lookup(hd.id)
	if inUse {
		g.refuseDuplicate(hd.id)
		return nil
	}
	if !hd.hasType {
		g.refuse(hd.id, protocol.CodeNoType, "the request has no type")
		return nil
	}
	typ := g.intern(hd.typ)
	if g.cfg.Serves == nil || !g.cfg.Serves(typ) {
		g.refuse(hd.id, protocol.CodeUnserved, fmt.Sprintf("no handler serves %q", bounded(hd.typ)))
		return nil
	}
	g.cfg.OnRequest(Request{ID: g.ids.add(hd.id, h), Type: typ, Line: line})
	return nil
}

// verdictReasons are the fault reasons of the validator's verdicts.
var verdictReasons = [...]string{vNotObject: reasonNotObject, vUTF8: reasonUTF8, vDepth: reasonDepth, vDupKey: reasonDupKey}

// oversized decides on a line found to be over the limit, from its head alone.
func (g *Gate) oversized(line []byte, offset int64) error {
	hd := g.heads.scan(line[:min(len(line), g.lim.headSize)])
	if !hd.ok {
		return newFault(reasonOversized, offset, line)
	}
	switch string(hd.event) {
	case eventHostRequest:
		if _, inUse := g.ids.lookup(hd.id); inUse {
			g.refuseDuplicate(hd.id)
		} else {
			g.refuse(hd.id, protocol.CodeTooLarge, fmt.Sprintf("the request's line is over %d bytes", g.lim.maxLine))
		}
		return nil
	case protocol.EventStream, protocol.EventDisplay:
		g.diag(fmt.Sprintf("gate: dropped a %s frame of id %q over %d bytes", hd.event, bounded(hd.id), g.lim.maxLine))
		return nil
	}
	return newFault(reasonOversized, offset, line)
}

func (g *Gate) refuse(id []byte, code protocol.Code, msg string) {
	if g.cfg.OnRefusal != nil {
		g.cfg.OnRefusal(Refusal{ID: string(id), Status: protocol.StatusError, Code: code, Message: msg})
	}
}

func (g *Gate) refuseDuplicate(id []byte) {
	if g.cfg.OnRefusal != nil {
		g.cfg.OnRefusal(Refusal{ID: string(id), Status: protocol.StatusDuplicate, Code: protocol.CodeDuplicate,
			Message: "a request with this id is in use"})
	}
	g.diag(fmt.Sprintf("gate: refused a host request with id %q in use", bounded(id)))
}

func (g *Gate) diag(msg string) {
	if g.cfg.OnDiagnostic != nil {
		g.cfg.OnDiagnostic(msg)
	}
}

// bounded cuts a kernel-chosen string for a message.
func bounded(b []byte) string {
	const n = 64
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}

// eventName returns the event's name without allocating for the protocol's events.
func eventName(b []byte) string {
	for _, e := range eventNames {
		if string(b) == e {
			return e
		}
	}
	return string(b)
}

// eventNames are the protocol's events other than host_request, the most frequent first.
var eventNames = [...]string{
	protocol.EventStream, protocol.EventJobOutput, protocol.EventDisplay, protocol.EventDone,
	protocol.EventHello, protocol.EventJobStart, protocol.EventJobEnd, protocol.EventLog,
}

// eventID returns id as a string, reusing one of the last few when equal: a cell's
// stream and display frames share their id, so most events allocate nothing.
func (g *Gate) eventID(id []byte) string {
	for _, s := range g.recent {
		if s == string(id) {
			return s
		}
	}
	s := string(id)
	g.recent[g.nextRecent] = s
	g.nextRecent = (g.nextRecent + 1) % len(g.recent)
	return s
}

// intern returns typ as a string, from a bounded table of names seen. The type of the
// last request is tried first: a kernel tends to send runs of one type.
func (g *Gate) intern(typ []byte) string {
	if g.lastType == string(typ) {
		return g.lastType
	}
	if s, ok := g.types[string(typ)]; ok {
		g.lastType = s
		return s
	}
	s := string(typ)
	if len(g.types) < maxTypes && len(s) <= 128 {
		g.types[s] = s
	}
	return s
}
