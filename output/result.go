package output

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// Result is a bounded output: the window kept and what was dropped. Its counts always
// satisfy KeptBytes + DroppedBytes = TotalBytes and KeptLines + DroppedLines =
// TotalLines.
type Result struct {
	// Kept is the window, a copy the caller owns: whole lines from the end Keep names, or
	// the first (head) or last (tail) line cut at a character boundary when not even one
	// whole line fits. Under Off it is every byte.
	Kept []byte
	// Keep is the end the window was taken from (Head under Off).
	Keep Keep
	// Off reports the opt-out: every byte is kept and no artifact is written, except that
	// a Capture's report (Capture.Bound) cannot keep more than the capture retained; what
	// it could not is dropped, and Retained says what can still be read.
	Off bool
	// TotalBytes and TotalLines count every byte and line produced. A last line without
	// '\n' is a line.
	TotalBytes, TotalLines int64
	// KeptBytes is len(Kept); KeptLines counts the lines every byte of which is kept.
	KeptBytes, KeptLines int64
	// DroppedBytes counts bytes not in Kept; DroppedLines counts lines of which at least
	// one byte was dropped (so a cut line counts as dropped).
	DroppedBytes, DroppedLines int64
	// Where says where the output can be read when bytes were dropped: the artifact
	// file's path for a Bounder with an artifact directory, or what the owner of the
	// output sets (a job: "job j3"). Empty: the output is not readable anywhere else.
	Where string
	// Retained lists, in order, the byte ranges of the output that can still be read
	// (at Where), when not every byte can be: a Capture's report past what the capture
	// retained (its first SpillLimit bytes and its last TailBytes). Nil: every byte can
	// (an artifact, or a capture that retained the whole output).
	Retained []Span
	// ReadWith names the call that reads Where by offset and limit, for the notice
	// (the daemon names its HTTP route); empty names none.
	ReadWith string
	// ArtifactErr is why the artifact (or a capture's spill file) could not be written,
	// or nil.
	ArtifactErr error
}

// fill sets the kept window and the counts derived from it; TotalBytes and TotalLines
// must be set.
func (r *Result) fill(kept []byte, whole bool) {
	r.Kept = bytes.Clone(kept)
	r.KeptBytes = int64(len(kept))
	if whole {
		r.KeptLines = countLines(kept)
	}
	r.DroppedBytes = r.TotalBytes - r.KeptBytes
	r.DroppedLines = r.TotalLines - r.KeptLines
}

func (r Result) clone() Result {
	r.Kept = bytes.Clone(r.Kept)
	r.Retained = slices.Clone(r.Retained)
	return r
}

// Truncated reports whether any byte was dropped.
func (r Result) Truncated() bool { return r.DroppedBytes > 0 }

// Notice is the one-line truncation notice that goes with a truncated result, or "" when
// nothing was dropped. It says which window was kept, how many bytes and lines were
// dropped, and where the output can be read: the whole of it, or exactly the ranges that
// were retained, and the call that reads them (ReadWith), e.g.
//
//	[output truncated: kept the first 51200 of 90000 bytes (2000 of 3500 lines); dropped 38800 bytes (1500 lines); full output: /run/kennel/output/kennel-output-123]
//	[output truncated: kept the first 51200 of 20971520 bytes (0 of 1 lines); dropped 20920320 bytes (1 lines); retained: job j3, bytes 0-16777215 and the last 65536 bytes (20905984-20971519) of 20971520; read with GET /sessions/s1/jobs/j3/output?offset=&limit=]
//
// Under Off (a capture's report past what it retained) it begins "[output not retained
// whole (truncation is off)".
func (r Result) Notice() string {
	if !r.Truncated() {
		return ""
	}
	var b strings.Builder
	end := "first"
	if r.Keep == Tail {
		end = "last"
	}
	if r.Off {
		b.WriteString("[output not retained whole (truncation is off)")
	} else {
		b.WriteString("[output truncated")
	}
	fmt.Fprintf(&b, ": kept the %s %d of %d bytes (%d of %d lines); dropped %d bytes (%d lines)",
		end, r.KeptBytes, r.TotalBytes, r.KeptLines, r.TotalLines, r.DroppedBytes, r.DroppedLines)
	switch {
	case r.Retained != nil:
		b.WriteString("; retained: ")
		if r.Where != "" {
			b.WriteString(r.Where + ", ")
		}
		writeSpans(&b, r.Retained, r.TotalBytes)
		if r.ArtifactErr != nil {
			fmt.Fprintf(&b, " (%v)", r.ArtifactErr)
		}
	case r.Where != "":
		fmt.Fprintf(&b, "; full output: %s", r.Where)
	case r.ArtifactErr != nil:
		fmt.Fprintf(&b, "; full output not kept: %v", r.ArtifactErr)
	default:
		b.WriteString("; full output not kept")
	}
	if r.ReadWith != "" && r.Where != "" {
		b.WriteString("; read with " + r.ReadWith)
	}
	b.WriteString("]")
	return b.String()
}

// writeSpans writes "bytes 0-16777215 and the last 65536 bytes (20905984-20971519) of
// 20971520": each non-empty span as inclusive byte numbers, one that ends the output as
// its last bytes.
func writeSpans(b *strings.Builder, spans []Span, total int64) {
	n := 0
	for _, s := range spans {
		if s.Limit <= 0 {
			continue
		}
		if n > 0 {
			b.WriteString(" and ")
		}
		if n > 0 && s.Offset+s.Limit == total {
			fmt.Fprintf(b, "the last %d bytes (%d-%d)", s.Limit, s.Offset, total-1)
		} else {
			fmt.Fprintf(b, "bytes %d-%d", s.Offset, s.Offset+s.Limit-1)
		}
		n++
	}
	if n == 0 {
		b.WriteString("no bytes")
	}
	fmt.Fprintf(b, " of %d", total)
}
