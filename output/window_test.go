package output

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

func mustBound(t fataler, text string, tr Truncation) Result {
	t.Helper()
	r, err := Bound([]byte(text), tr)
	if err != nil {
		t.Fatalf("Bound: %v", err)
	}
	return r
}

func TestBoundWindows(t *testing.T) {
	head := func(b, l int64) Truncation { return On(Limits{Bytes: b, Lines: l, Keep: Head}) }
	tail := func(b, l int64) Truncation { return On(Limits{Bytes: b, Lines: l, Keep: Tail}) }
	tests := []struct {
		name                string
		text                string
		tr                  Truncation
		kept                string
		keptLines, dropped  int64
		droppedLines, lines int64
	}{
		{"empty", "", head(10, 2), "", 0, 0, 0, 0},
		{"fits whole", "a\nb\n", head(10, 2), "a\nb\n", 2, 0, 0, 2},
		{"fits exactly, no final newline", "ab\ncd", head(5, 2), "ab\ncd", 2, 0, 0, 2},
		{"head by lines", "a\nb\nc\n", head(100, 2), "a\nb\n", 2, 2, 1, 3},
		{"tail by lines", "a\nb\nc\n", tail(100, 2), "b\nc\n", 2, 2, 1, 3},
		{"head by bytes", "aaa\nbbb\nccc\n", head(9, 10), "aaa\nbbb\n", 2, 4, 1, 3},
		{"tail by bytes", "aaa\nbbb\nccc\n", tail(9, 10), "bbb\nccc\n", 2, 4, 1, 3},
		{"tail keeps partial last line whole", "aaa\nbb", tail(3, 10), "bb", 1, 4, 1, 2},
		{"head: a final line without newline in a longer text is not whole", "abcdef", head(3, 10), "abc", 0, 3, 1, 1},
		{"head cut", "abcdef\nx\n", head(4, 10), "abcd", 0, 5, 2, 2},
		{"tail cut keeps the newline", "x\nabcdef\n", tail(4, 10), "def\n", 0, 5, 2, 2},
		{"head cut at utf-8 boundary", "aé€\n", head(4, 10), "aé", 0, 4, 1, 1}, // a(1) é(2) €(3) \n(1)
		{"tail cut at utf-8 boundary", "é€x", tail(3, 10), "x", 0, 5, 1, 1},    // "€x" would be 4 bytes
		{"tail cut at a boundary exactly", "é€x", tail(4, 10), "€x", 0, 2, 1, 1},
		{"one-byte limit and multibyte", "€", head(1, 1), "", 0, 3, 1, 1},
		{"invalid utf-8 has no boundary", "\x80\x80\x80\x80\x80\x80", head(5, 1), "\x80\x80\x80\x80\x80", 0, 1, 1, 1},
		{"off keeps all", strings.Repeat("x\n", 5000), Off(), strings.Repeat("x\n", 5000), 5000, 0, 0, 5000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := mustBound(t, tc.text, tc.tr)
			if string(r.Kept) != tc.kept || r.KeptLines != tc.keptLines || r.DroppedBytes != tc.dropped ||
				r.DroppedLines != tc.droppedLines || r.TotalLines != tc.lines {
				t.Fatalf("Bound(%q, %v) = kept %q (%d lines), dropped %d bytes %d lines, total %d lines; want %q (%d), %d, %d, %d",
					tc.text, tc.tr, r.Kept, r.KeptLines, r.DroppedBytes, r.DroppedLines, r.TotalLines,
					tc.kept, tc.keptLines, tc.dropped, tc.droppedLines, tc.lines)
			}
		})
	}
}

func TestTruncationDefaultsAndResolve(t *testing.T) {
	var zero Truncation
	if got := zero.Limits(); got != (Limits{Bytes: 50 << 10, Lines: 2000, Keep: Head}) {
		t.Fatalf("zero Truncation limits = %+v", got)
	}
	if zero != Default() || zero.IsOff() {
		t.Fatalf("zero Truncation is not the default")
	}
	sess, call := On(Limits{Bytes: 10}), Off()
	if got := Resolve(&sess, &call); got != call {
		t.Fatalf("Resolve(session, call) = %v, want the call's %v", got, call)
	}
	if got := Resolve(&sess, nil); got != sess {
		t.Fatalf("Resolve(session, nil) = %v, want the session's", got)
	}
	if got := Resolve(nil, nil); got != Default() {
		t.Fatalf("Resolve(nil, nil) = %v, want default", got)
	}
	for _, bad := range []Truncation{On(Limits{Bytes: -1}), On(Limits{Lines: -3}), On(Limits{Keep: 7})} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalidLimits) {
			t.Errorf("%v.Validate() = %v, want ErrInvalidLimits", bad, err)
		}
		if _, err := Bound([]byte("x"), bad); !errors.Is(err, ErrInvalidLimits) {
			t.Errorf("Bound with %v = %v, want ErrInvalidLimits", bad, err)
		}
		if _, err := NewBounder(bad, BounderOptions{}); !errors.Is(err, ErrInvalidLimits) {
			t.Errorf("NewBounder(%v) = %v, want ErrInvalidLimits", bad, err)
		}
	}
}

// genText generates outputs rich in what matters to the window: newlines, multibyte
// characters, invalid bytes, long lines.
func genText(t *rapid.T, label string) []byte {
	pieces := rapid.SliceOfN(rapid.SampledFrom([]string{
		"\n", "a", "bc", "line\n", "é", "€", "𝄞", "\xff", "\x80", "\n\n", strings.Repeat("z", 40), "é\n",
	}), 0, 60).Draw(t, label)
	return []byte(strings.Join(pieces, ""))
}

func genTruncation(t *rapid.T) Truncation {
	if rapid.IntRange(0, 9).Draw(t, "off") == 0 {
		return Off()
	}
	return On(Limits{
		Bytes: rapid.Int64Range(1, 120).Draw(t, "bytes"),
		Lines: rapid.Int64Range(1, 12).Draw(t, "lines"),
		Keep:  rapid.SampledFrom([]Keep{Head, Tail}).Draw(t, "keep"),
	})
}

// checkLaws states the limits' laws of one result of bounding text with tr.
func checkLaws(t *rapid.T, text []byte, tr Truncation, r Result) {
	total, lines := int64(len(text)), countLines(text)
	if r.TotalBytes != total || r.TotalLines != lines {
		t.Fatalf("totals %d bytes %d lines, want %d %d", r.TotalBytes, r.TotalLines, total, lines)
	}
	if r.KeptBytes+r.DroppedBytes != total || r.KeptLines+r.DroppedLines != lines || r.KeptBytes != int64(len(r.Kept)) {
		t.Fatalf("not conserved: kept %d+%d dropped != %d bytes, or %d+%d != %d lines", r.KeptBytes, r.DroppedBytes, total, r.KeptLines, r.DroppedLines, lines)
	}
	if tr.IsOff() {
		if !bytes.Equal(r.Kept, text) || r.Truncated() {
			t.Fatalf("Off dropped bytes")
		}
		return
	}
	l := tr.Limits()
	if r.KeptBytes > l.Bytes || countLines(r.Kept) > l.Lines || r.KeptLines > l.Lines {
		t.Fatalf("window over the cap: %d bytes %d lines, cap %d %d", r.KeptBytes, countLines(r.Kept), l.Bytes, l.Lines)
	}
	if total <= l.Bytes && lines <= l.Lines && (r.Truncated() || !bytes.Equal(r.Kept, text)) {
		t.Fatalf("output that fits was truncated")
	}
	if l.Keep == Head && !bytes.HasPrefix(text, r.Kept) || l.Keep == Tail && !bytes.HasSuffix(text, r.Kept) {
		t.Fatalf("window %q is not the %s of %q", r.Kept, l.Keep, text)
	}
	if r.Truncated() != (r.Notice() != "") {
		t.Fatalf("notice %q for truncated=%v", r.Notice(), r.Truncated())
	}
	if utf8.Valid(text) && !utf8.Valid(r.Kept) {
		t.Fatalf("window %q of valid UTF-8 splits a character", r.Kept)
	}
}

// refWindow is a naive model of the window rule over valid UTF-8: split into lines, take
// whole lines greedily, else cut the first (head) or last (tail) line where it is valid.
func refWindow(text string, l Limits) string {
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) == 0 {
		return ""
	}
	if l.Keep == Tail {
		for i, j := 0, len(lines)-1; i < j; i, j = i+1, j-1 {
			lines[i], lines[j] = lines[j], lines[i]
		}
	}
	var kept []string
	n := int64(0)
	for _, ln := range lines {
		if int64(len(kept)) >= l.Lines || n+int64(len(ln)) > l.Bytes {
			break
		}
		kept = append(kept, ln)
		n += int64(len(ln))
	}
	if len(kept) == 0 {
		ln := lines[0]
		if l.Keep == Head {
			i := int(l.Bytes)
			for !utf8.ValidString(ln[:i]) {
				i--
			}
			return ln[:i]
		}
		i := len(ln) - int(l.Bytes)
		for !utf8.ValidString(ln[i:]) {
			i++
		}
		return ln[i:]
	}
	if l.Keep == Tail {
		for i, j := 0, len(kept)-1; i < j; i, j = i+1, j-1 {
			kept[i], kept[j] = kept[j], kept[i]
		}
	}
	return strings.Join(kept, "")
}

func TestPropBoundLaws(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		text, tr := genText(t, "text"), genTruncation(t)
		r, err := Bound(text, tr)
		if err != nil {
			t.Fatal(err)
		}
		checkLaws(t, text, tr, r)
	})
}

func TestPropBoundMatchesNaiveModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		text := rapid.StringOf(rapid.SampledFrom([]rune{'a', 'b', '\n', 'é', '€', '𝄞'})).Draw(t, "text")
		l := Limits{
			Bytes: rapid.Int64Range(1, 40).Draw(t, "bytes"),
			Lines: rapid.Int64Range(1, 6).Draw(t, "lines"),
			Keep:  rapid.SampledFrom([]Keep{Head, Tail}).Draw(t, "keep"),
		}
		r := mustBound(t, text, On(l))
		if want := refWindow(text, l); string(r.Kept) != want {
			t.Fatalf("Bound(%q, %+v) kept %q, model %q", text, l, r.Kept, want)
		}
	})
}

// chunk splits text at generated points.
func chunk(t *rapid.T, text []byte) [][]byte {
	var out [][]byte
	for len(text) > 0 {
		n := rapid.IntRange(1, max(1, len(text))).Draw(t, "chunk")
		out = append(out, text[:n])
		text = text[n:]
	}
	return out
}

func TestPropBounderStreamEqualsWhole(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		text, tr := genText(t, "text"), genTruncation(t)
		dir := privateTempDir(t)
		b, err := NewBounder(tr, BounderOptions{ArtifactDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		var sofar []byte
		for _, c := range chunk(t, text) {
			if n, err := b.Write(c); n != len(c) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			sofar = append(sofar, c...)
			if !tr.IsOff() && int64(len(b.buf)) > 2*(tr.Limits().Bytes+1) {
				t.Fatalf("bounder stores %d bytes, cap %d", len(b.buf), tr.Limits().Bytes)
			}
			// A snapshot is the window of the output so far.
			want, _ := Bound(sofar, tr)
			if snap := b.Snapshot(); !sameWindow(snap, want) {
				t.Fatalf("snapshot after %d bytes: %q, whole gives %q", len(sofar), snap.Kept, want.Kept)
			}
		}
		got := b.Result()
		want, _ := Bound(text, tr)
		checkLaws(t, text, tr, got)
		if !sameWindow(got, want) {
			t.Fatalf("stream kept %q (%+v), whole kept %q (%+v)", got.Kept, got, want.Kept, want)
		}
		// The artifact holds the full output exactly when bytes were dropped.
		if got.Truncated() {
			if got.Where == "" {
				t.Fatalf("truncated with no artifact: %v", got.ArtifactErr)
			}
			full, err := readFileMode(got.Where, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(full, text) {
				t.Fatalf("artifact holds %d bytes, output was %d", len(full), len(text))
			}
			if !strings.Contains(got.Notice(), got.Where) {
				t.Fatalf("notice %q does not name the artifact", got.Notice())
			}
		} else if got.Where != "" || dirLen(t, dir) != 0 {
			t.Fatalf("artifact written for an output that fits")
		}
		if _, err := b.Write([]byte("late")); !errors.Is(err, ErrClosed) {
			t.Fatalf("write after Result = %v, want ErrClosed", err)
		}
	})
}

func sameWindow(a, b Result) bool {
	return bytes.Equal(a.Kept, b.Kept) && a.TotalBytes == b.TotalBytes && a.TotalLines == b.TotalLines &&
		a.KeptLines == b.KeptLines && a.DroppedBytes == b.DroppedBytes && a.DroppedLines == b.DroppedLines
}

func TestNoticeSaysWhatWasDropped(t *testing.T) {
	r := mustBound(t, "one\ntwo\nthree\n", On(Limits{Bytes: 100, Lines: 1, Keep: Tail}))
	r.Where = "/x/kennel-output-1"
	want := "[output truncated: kept the last 6 of 14 bytes (1 of 3 lines); dropped 8 bytes (2 lines); full output: /x/kennel-output-1]"
	if r.Notice() != want {
		t.Fatalf("notice\n got %s\nwant %s", r.Notice(), want)
	}
	r.Where = ""
	if !strings.HasSuffix(r.Notice(), "full output not kept]") {
		t.Fatalf("notice without artifact: %s", r.Notice())
	}
}

// TestBounderArtifactFailureIsReported removes the artifact directory before the output
// passes the bound: the writer goes on, the window is right, and the notice says why the
// full output was not kept.
func TestBounderArtifactFailureIsReported(t *testing.T) {
	dir := privateTempDir(t)
	tr := On(Limits{Bytes: 4, Lines: 10})
	b, err := NewBounder(tr, BounderOptions{ArtifactDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"ab\n", "cd\n", "ef\n"} {
		if n, err := b.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	r := b.Result()
	if string(r.Kept) != "ab\n" || r.DroppedBytes != 6 || r.Where != "" || r.ArtifactErr == nil {
		t.Fatalf("result %+v", r)
	}
	if !strings.Contains(r.Notice(), "full output not kept: create artifact") {
		t.Fatalf("notice %q does not say why", r.Notice())
	}
}
