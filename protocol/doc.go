// Package protocol holds the frames of the kennel kernel protocol (docs/protocol.md) as Go
// values: the limits, the error codes that cross the boundary, encoders for the frames the
// host writes to a kernel, and strict decoders for the events a kernel writes to the host.
//
// Every frame is one JSON object on one line. Host frames are encoded with `type` then `id`
// first and end in a newline; kernel events are decoded only after the frame gate
// (package controller/gate) has let the line through, but the decoders do not rely on it:
// each checks its whole input and returns a *FrameError (errors.Is-able against
// ErrMalformed, ErrWrongEvent or ErrBadField) for anything a kernel could send wrong.
//
// Encoding a reply and decoding an event:
//
//	line, err := protocol.MarshalLine(protocol.HostReply{
//		ID:     "h7",
//		Status: protocol.StatusError,
//		Error:  &protocol.ReplyError{Code: protocol.CodeNotFound, Message: "no such file"},
//	})
//	// line == `{"type":"host_reply","id":"h7","status":"error","error":{"code":"not_found","message":"no such file"}}` + "\n"
//
//	ev, err := protocol.DecodeEvent([]byte(`{"event":"stream","id":"c1","name":"stdout","text":"42\n"}`))
//	// ev.(protocol.Stream).Text == "42\n"
package protocol
