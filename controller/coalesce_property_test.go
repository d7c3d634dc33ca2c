package controller_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/jobs"
)

// textSink records a cell's output as a controller.TextSink (the bytes and JSON form
// the hot path gives), merging consecutive text of one stream.
type textSink struct {
	mu     sync.Mutex
	runs   []streamRun
	quoted int // calls that carried a JSON form
	bad    string
}

type streamRun struct{ name, text string }

func (s *textSink) add(name, text string) {
	if n := len(s.runs); n > 0 && s.runs[n-1].name == name {
		s.runs[n-1].text += text
	} else {
		s.runs = append(s.runs, streamRun{name, text})
	}
}

func (s *textSink) Stream(name, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.add(name, text)
}

func (s *textSink) StreamText(name string, text, quoted []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.add(name, string(text))
	if quoted != nil {
		s.quoted++
		var dec string
		if err := json.Unmarshal(quoted, &dec); err != nil || dec != string(text) {
			s.bad = "quoted " + string(quoted) + " decodes to " + dec + ", not " + string(text)
		}
	}
}

func (s *textSink) Display(json.RawMessage) {}

// TestAnySplitOfWritesGivesTheSameStream: however a cell splits its writes to stdout and
// stderr (print, write, flush, pieces of any size, a pause longer than the coalescing
// delay), the host receives exactly the text written, stream by stream in the order
// written, through the stub's coalescing and the host's one-pass decoding; the cell's
// job counts exactly its bytes and lines (generated).
func TestAnySplitOfWritesGivesTheSameStream(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	rapid.Check(t, func(rt *rapid.T) {
		type write struct {
			Name, Text, How string
		}
		var writes []write
		var want []streamRun
		var total int64
		var lines int64
		var all strings.Builder
		for i, n := 0, rapid.IntRange(1, 12).Draw(rt, "writes"); i < n; i++ {
			name := rapid.SampledFrom([]string{"stdout", "stderr"}).Draw(rt, "name")
			unit := rapid.SampledFrom([]string{"x", "line\n", "\"q\\", "\t\r\x01\x7f", "é中\U0001f600", strings.Repeat("y", 999) + "\n"}).Draw(rt, "unit")
			text := strings.Repeat(unit, rapid.IntRange(1, 300).Draw(rt, "repeat"))
			// Split the text at points drawn, each piece written its own way.
			rest := text
			for rest != "" {
				k := min(len(rest), rapid.SampledFrom([]int{1, 7, 1000, 70000, 1 << 20}).Draw(rt, "piece"))
				for k < len(rest) && !utf8.RuneStart(rest[k]) {
					k++ // not within a character
				}
				how := rapid.SampledFrom([]string{"write", "print", "flush", "pause"}).Draw(rt, "how")
				writes = append(writes, write{name, rest[:k], how})
				rest = rest[k:]
			}
			if n := len(want); n > 0 && want[n-1].name == name {
				want[n-1].text += text
			} else {
				want = append(want, streamRun{name, text})
			}
			total += int64(len(text))
			all.WriteString(text)
		}
		lines = int64(strings.Count(all.String(), "\n"))
		if !strings.HasSuffix(all.String(), "\n") {
			lines++
		}
		plan, _ := json.Marshal(writes)
		code := "import json, sys, time\n" +
			"for w in json.loads(" + pyString(string(plan)) + "):\n" +
			"    f = getattr(sys, w['Name'])\n" +
			"    if w['How'] == 'print':\n" +
			"        print(w['Text'], end='', file=f)\n" +
			"    else:\n" +
			"        f.write(w['Text'])\n" +
			"    if w['How'] == 'flush':\n" +
			"        f.flush()\n" +
			"    elif w['How'] == 'pause':\n" +
			"        time.sleep(0.003)\n"
		sink := &textSink{}
		w, err := s.ExecuteWait(context.Background(), code, time.Minute, sink)
		if err != nil {
			rt.Fatal(err)
		}
		st, ok := w.Outcome.(jobs.Settled)
		if !ok || w.Cell == nil || w.Cell.Status != "ok" {
			rt.Fatalf("cell: %#v %+v", w.Outcome, w.Cell)
		}
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if sink.bad != "" {
			rt.Fatal(sink.bad)
		}
		if len(sink.runs) != len(want) {
			rt.Fatalf("%d runs of streams, want %d", len(sink.runs), len(want))
		}
		for i := range want {
			if sink.runs[i] != want[i] {
				rt.Fatalf("run %d: %s of %d bytes, want %s of %d bytes", i, sink.runs[i].name, len(sink.runs[i].text), want[i].name, len(want[i].text))
			}
		}
		if sink.quoted == 0 {
			rt.Fatalf("no stream came with its JSON form")
		}
		if out := st.Output; out.TotalBytes != total || out.TotalLines != lines {
			rt.Fatalf("job counted %d bytes, %d lines; want %d, %d", out.TotalBytes, out.TotalLines, total, lines)
		}
	})
}

// pyString is s as a Python string literal (JSON's escapes are Python's).
func pyString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
