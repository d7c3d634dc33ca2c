package output

import (
	"bytes"
	"fmt"
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
	// Off reports the opt-out: nothing was dropped and no artifact was written.
	Off bool
	// TotalBytes and TotalLines count every byte and line produced. A last line without
	// '\n' is a line.
	TotalBytes, TotalLines int64
	// KeptBytes is len(Kept); KeptLines counts the lines every byte of which is kept.
	KeptBytes, KeptLines int64
	// DroppedBytes counts bytes not in Kept; DroppedLines counts lines of which at least
	// one byte was dropped (so a cut line counts as dropped).
	DroppedBytes, DroppedLines int64
	// Where says where the full output can be read when bytes were dropped: the
	// artifact file's path for a Bounder with an artifact directory, or what the owner
	// of the output sets (a job's id). Empty: the full output was not kept.
	Where string
	// ArtifactErr is why the artifact could not be written, or nil.
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
	return r
}

// Truncated reports whether any byte was dropped.
func (r Result) Truncated() bool { return r.DroppedBytes > 0 }

// Notice is the one-line truncation notice that goes with a truncated result, or "" when
// nothing was dropped. It says which window was kept, how many bytes and lines were
// dropped, and where the full output is (or why it is not kept), e.g.
//
//	[output truncated: kept the first 51200 of 90000 bytes (2000 of 3500 lines); dropped 38800 bytes (1500 lines); full output: /run/kennel/output/kennel-output-123]
func (r Result) Notice() string {
	if !r.Truncated() {
		return ""
	}
	var b strings.Builder
	end := "first"
	if r.Keep == Tail {
		end = "last"
	}
	fmt.Fprintf(&b, "[output truncated: kept the %s %d of %d bytes (%d of %d lines); dropped %d bytes (%d lines)",
		end, r.KeptBytes, r.TotalBytes, r.KeptLines, r.TotalLines, r.DroppedBytes, r.DroppedLines)
	switch {
	case r.Where != "":
		fmt.Fprintf(&b, "; full output: %s", r.Where)
	case r.ArtifactErr != nil:
		fmt.Fprintf(&b, "; full output not kept: %v", r.ArtifactErr)
	default:
		b.WriteString("; full output not kept")
	}
	b.WriteString("]")
	return b.String()
}
