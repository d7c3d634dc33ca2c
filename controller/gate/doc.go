// Package gate is the frame gate: it splits a kernel's stdout into lines and decides on
// each one, in order, before any handler sees it (docs/protocol.md, "The gate").
//
// For each line the gate makes exactly one decision:
//
//   - A line within the limit (MaxLine bytes with its newline) must be valid UTF-8 and one
//     JSON object, with "event" as its first key and "id" as its second, both strings,
//     within the line's first HeadSize bytes (the head). The keys "event", "id" and "type"
//     may not appear twice at the top level, so every later decoder reads the values the
//     gate decided on. Anything else is a *ProtocolFault, and Run stops.
//   - A host_request whose id is in use gets a Refusal with status "duplicate" (code
//     duplicate) and runs nothing. This check comes first, before the size and type
//     checks, because any "error" reply under an id in flight would settle that request.
//   - A host_request over the limit gets a Refusal too_large. Its head must still name
//     event host_request and a string id; the gate reads the rest up to the newline
//     through its buffer without keeping it.
//   - A host_request whose third key is not "type" with a string value complete in the
//     head gets a Refusal no_type; one whose type Config.Serves does not serve gets a
//     Refusal unserved.
//   - Any other host_request is accepted: Config.OnRequest receives it, exactly once.
//   - Every other event within the limit (hello, stream, display, done, job_*, log, and
//     events this version does not know) goes to Config.OnEvent. A stream or display line
//     over the limit is dropped with a diagnostic; any other line over the limit is a
//     *ProtocolFault.
//
// An id is in use when it is among the IDsKept (1024) newest ids the gate accepted. Only
// accepted ids count: a refused request ran nothing and its reply settled it, so the
// kernel may reuse its id. An id that has left the ring may be accepted again, even if
// its handler still runs; the kernel never reuses an id that soon.
//
// An empty line (or one of whitespace only) is a fault: it is not a JSON object, and the
// stub never writes one. So is a last line that the end of the stream cuts off before
// its newline: the kernel died mid-frame, and the host says so loudly.
//
// Heads are read by a small scanner, not by encoding/json: escapes in keys and values are
// decoded exactly as encoding/json decodes them (a lone surrogate becomes U+FFFD), and
// JSON whitespace is allowed between tokens. Whole lines are checked by a validator that
// accepts exactly what json.Valid accepts (nesting up to 10000) when the line is valid
// UTF-8 and an object, and allocates nothing. A line of up to 2 KiB is tried first with a
// structural scan, as simdjson does it: vector compares classify each 64-byte block into
// bit masks, bit arithmetic finds the escapes, the strings and where each token starts,
// and a walk over the tokens checks the grammar. Longer lines, and any line the scan does
// not accept (the verdict and its reason come from here), are checked token by token,
// with string bodies crossed 64 bytes a step, escapes included, by AVX2 where the CPU has
// it. The build tag purego keeps both to Go (and the scan off). UTF-8 is checked only on
// lines holding non-ASCII bytes. A within-limit line's head is taken from the
// validator's pass; only a line over the limit is scanned for its head alone.
//
// Memory: the gate holds a line whole only while it is within the limit, so its buffer
// grows to about MaxLine at most (and shrinks back once long lines stop). Past the limit
// it reads the rest of the line through that buffer and keeps none of it. A Frame's or a
// Request's Line is the gate's buffer, valid only during the callback that receives it
// (as with bufio.Scanner.Bytes): a handler that runs on copies it first. IDs and types
// are strings the receiver may keep; accepting a request allocates nothing per request
// (ids are copied into shared 4 KiB blocks, so a kept id keeps its block alive).
//
// Use:
//
//	g := gate.New(gate.Config{
//		Serves:    func(typ string) bool { _, ok := handlers[typ]; return ok },
//		OnRequest: func(r gate.Request) {
//			line := bytes.Clone(r.Line) // r.Line is the gate's buffer
//			go serve(r.ID, r.Type, line)
//		},
//		OnRefusal: func(r gate.Refusal) { reply(r.ID, r.Status, r.Code, r.Message) },
//		OnEvent:   func(f gate.Frame) { route(f.Event, f.ID, f.Line) },
//	})
//	err := g.Run(ctx, kernel.Stdout())
//	var fault *gate.ProtocolFault
//	if errors.As(err, &fault) {
//		// replace the kernel, loudly
//	}
package gate
