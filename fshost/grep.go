package fshost

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"io/fs"
	"regexp"
	"regexp/syntax"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/kennel-dev/kennel/fshost/fsroot"
)

// GrepArgs are the arguments of fs.grep.
type GrepArgs struct {
	// Pattern is a Go (RE2) regular expression matched against each line. Required.
	Pattern string `json:"pattern"`
	// Path is the file or directory to search; "" means Cwd.
	Path string `json:"path"`
	// Glob, if set, keeps only files whose path below Path matches it (fs.glob's syntax;
	// a glob without "/" matches the file's name at any depth).
	Glob string `json:"glob"`
	// Limit is the most matches to return; 0 or more than GrepMaxMatches means
	// GrepMaxMatches.
	Limit int `json:"limit"`
	// Cwd is the request's working directory (a sandbox path); "" means the session's.
	Cwd string `json:"cwd"`
}

// Match is one matching line.
type Match struct {
	// Path is the file's sandbox path.
	Path string `json:"path"`
	// Line is the line number, 1-based.
	Line int `json:"line"`
	// Text is the line without its newline, cut to MaxLineBytes at a rune boundary.
	Text string `json:"text"`
}

// GrepResult is the reply of fs.grep.
type GrepResult struct {
	// Matches are in the walk's order (files in lexical order, lines in order).
	Matches []Match `json:"matches"`
	// Truncated reports that the bounds (Limit, GrepMaxBytes) left matches out.
	Truncated bool `json:"truncated"`
	// Files is how many files were searched. When the bounds stopped the search early,
	// it depends on timing; the matches do not.
	Files int `json:"files"`
}

// grepMaxLine bounds a line searched in a chunked file; a longer line is cut.
const grepMaxLine = 8 << 20

// Grep serves fs.grep: a regexp search over the files of a tree (or one file), listed by
// the Root's WalkDir (skipping .git and what .gitignore files ignore; never
// following symlinks). Binary files (a NUL in the first 8 KiB, or invalid UTF-8) are
// skipped. Files are read and searched by a small pool of workers, each file opened
// again by the Root (Root.ReadFile: no symlink on the way).
// The reply holds the first matches in walk order, bounded by Limit and GrepMaxBytes;
// the same tree always gives the same reply.
func (s *Server) Grep(ctx context.Context, a GrepArgs) (*GrepResult, error) {
	const op = TypeGrep
	if a.Pattern == "" {
		return nil, fail(op, "", fsroot.ErrInvalid, "pattern is required")
	}
	mt, err := compileMatcher(a.Pattern)
	if err != nil {
		return nil, fail(op, "", fsroot.ErrInvalid, "pattern: %v", cutUTF8(err.Error(), 200))
	}
	var filter *globPattern
	if a.Glob != "" {
		g := a.Glob
		if !bytes.ContainsRune([]byte(g), '/') {
			g = "**/" + g
		}
		if filter, err = compileGlob(g); err != nil {
			return nil, fail(op, "", fsroot.ErrInvalid, "glob: %v", err)
		}
	}
	limit := s.opts.GrepMaxMatches
	if a.Limit > 0 && a.Limit < limit {
		limit = a.Limit
	}
	base := cmp.Or(a.Path, ".")
	at, err := s.root.Stat(ctx, a.Cwd, base)
	if err != nil {
		return nil, err
	}
	if !at.Exists {
		return nil, fail(op, at.Path, fsroot.ErrNotFound, "")
	}
	g := &grepRun{
		s: s, mt: mt, limit: limit, maxBytes: s.opts.GrepMaxBytes, cwd: a.Cwd,
	}
	return g.run(ctx, at.Path, filter)
}

// grepRun is one fs.grep.
type grepRun struct {
	s        *Server
	mt       *matcher
	limit    int
	maxBytes int
	cwd      string // the request's

	mu      sync.Mutex
	found   []fileMatches // by walk index
	count   int           // matches found so far
	size    int           // their reply bytes so far
	stopped bool
}

// fileMatches are one file's matches.
type fileMatches struct {
	idx     int
	matches []Match
	more    bool // the file had more matches than the limit
}

type grepJob struct {
	idx int
	e   fsroot.Entry
}

// run searches the tree at the sandbox path at.
func (g *grepRun) run(parent context.Context, at string, filter *globPattern) (*GrepResult, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	jobs := make(chan grepJob, 64)
	var wg sync.WaitGroup
	for range g.s.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := grepWorker{run: g}
			for j := range jobs { // every file sent is searched, so the kept matches are the first ones
				if fm := w.file(ctx, j); fm != nil && g.add(fm) {
					cancel()
				}
			}
		}()
	}
	files := 0
	walkErr := g.s.root.WalkDir(ctx, g.cwd, at, func(e fsroot.Entry) error {
		if !e.Type.IsRegular() || (filter != nil && !filter.matchPath(e.Rel)) {
			return nil
		}
		select {
		case jobs <- grepJob{idx: files, e: e}:
			files++
			return nil
		case <-ctx.Done():
			return fs.SkipAll
		}
	})
	close(jobs)
	wg.Wait()
	switch {
	case g.stopped: // read after wg.Wait: no worker writes it any more
	case parent.Err() != nil:
		return nil, fail(TypeGrep, at, fsroot.ErrInternal, "%v", parent.Err())
	case walkErr != nil:
		return nil, walkErr
	}
	return g.result(files), nil
}

// add records a file's matches and reports whether the bounds are reached (every file
// walked after this point can only add matches after the ones kept).
func (g *grepRun) add(fm *fileMatches) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.found = append(g.found, *fm)
	g.count += len(fm.matches)
	for _, m := range fm.matches {
		g.size += matchSize(m)
	}
	if g.count > g.limit || g.size > g.maxBytes || fm.more {
		g.stopped = true
	}
	return g.stopped
}

// matchSize is what a match costs of the reply's byte bound.
func matchSize(m Match) int { return len(m.Path) + len(m.Text) + 16 }

// result orders the matches by walk order and applies the bounds.
func (g *grepRun) result(files int) *GrepResult {
	slices.SortFunc(g.found, func(a, b fileMatches) int { return a.idx - b.idx })
	res := &GrepResult{Matches: []Match{}, Files: files}
	size := 0
	for _, fm := range g.found {
		for _, m := range fm.matches {
			if len(res.Matches) == g.limit || size+matchSize(m) > g.maxBytes {
				res.Truncated = true
				return res
			}
			size += matchSize(m)
			res.Matches = append(res.Matches, m)
		}
		if fm.more {
			res.Truncated = true
			return res
		}
	}
	return res
}

// grepWorker searches files with its own buffer.
type grepWorker struct {
	run *grepRun
	buf []byte
}

// file searches one file; nil when it has no match (or cannot be read, or is binary).
func (w *grepWorker) file(ctx context.Context, j grepJob) *fileMatches {
	g := w.run
	data, more, err := g.s.root.ReadFile(ctx, j.e, w.buf, g.s.sizes.grepWhole)
	if cap(data) <= 4<<20 {
		w.buf = data[:0]
	}
	if err != nil {
		return nil
	}
	if more {
		return w.chunked(ctx, j)
	}
	if hasNUL(data, 0) {
		return nil
	}
	fm := &fileMatches{idx: j.idx}
	g.collect(fm, j.e.Path, data, 1)
	if len(fm.matches) == 0 || !utf8.Valid(data) {
		return nil
	}
	return fm
}

var nl = []byte{'\n'}

// collect adds to fm the matching lines of buf, a piece of the file at path whose first
// line is number line, up to the run's limit (fm.more when there are more). It returns
// the number of the line of the last match searched and where that line starts in buf.
func (g *grepRun) collect(fm *fileMatches, path string, buf []byte, line int) (int, int) {
	last := 0
	g.mt.search(buf, func(ls, le int) bool {
		line += bytes.Count(buf[last:ls], nl)
		last = ls
		if len(fm.matches) == g.limit {
			fm.more = true
			return false
		}
		fm.matches = append(fm.matches, Match{Path: path, Line: line, Text: string(cutUTF8(buf[ls:le], g.s.opts.MaxLineBytes))})
		return true
	})
	return line, last
}

// chunked searches a file too large to read whole, in chunks of whole lines. It is
// opened by its path again; if that leads elsewhere than the entry walked (a symlink
// swapped in), it is skipped.
func (w *grepWorker) chunked(ctx context.Context, j grepJob) *fileMatches {
	g := w.run
	f, info, err := g.s.root.Open(ctx, g.cwd, j.e.Path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if info.Path != j.e.Path {
		return nil
	}
	fm := &fileMatches{idx: j.idx}
	buf := make([]byte, g.s.sizes.grepChunk)
	var u utf8Stream
	n, line := 0, 1
	var off int64
	for {
		k, err := io.ReadFull(f, buf[n:])
		if k > 0 {
			if hasNUL(buf[n:n+k], off) {
				return nil
			}
			u.write(buf[n : n+k])
			off += int64(k)
		}
		n += k
		eof := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !eof {
			return nil
		}
		end := bytes.LastIndexByte(buf[:n], '\n') + 1
		switch {
		case eof:
			end = n
		case end == 0 && n == len(buf) && len(buf) < grepMaxLine:
			buf = append(buf, make([]byte, len(buf))...) // a long line: grow
			continue
		case end == 0:
			end = n // a line over grepMaxLine: searched in pieces
		}
		chunk := buf[:end]
		var last int
		line, last = g.collect(fm, j.e.Path, chunk, line)
		line += bytes.Count(chunk[last:], nl)
		if fm.more || eof {
			break
		}
		n = copy(buf, buf[end:n])
	}
	if len(fm.matches) == 0 || (!fm.more && !u.valid()) {
		return nil
	}
	return fm
}

// matcher finds the lines of a buffer that match a regexp.
type matcher struct {
	re *regexp.Regexp // the pattern, in multi-line mode
	// lit is a literal every match contains (nil if none is known); pure: the pattern is
	// exactly lit, so a line holding lit matches without running the regexp.
	lit  []byte
	pure bool
	// perLine: the pattern uses \A or \z, which mean the line's ends: run it line by line.
	perLine bool
}

// compileMatcher compiles a pattern for line-by-line matching.
func compileMatcher(pattern string) (*matcher, error) {
	re, err := regexp.Compile("(?m:" + pattern + ")")
	if err != nil {
		return nil, err
	}
	mt := &matcher{re: re}
	parsed, err := syntax.Parse("(?m:"+pattern+")", syntax.Perl)
	if err != nil {
		return nil, err
	}
	parsed = parsed.Simplify()
	mt.perLine = usesTextAnchors(parsed)
	if lit := requiredLiteral(parsed); len(lit) > 0 && !bytes.ContainsRune(lit, '\n') {
		mt.lit = lit
		prefix, complete := re.LiteralPrefix()
		mt.pure = complete && prefix == string(lit)
	}
	return mt, nil
}

// search calls emit with the start and end (before the newline) of each matching line
// of buf, in order, until emit returns false.
func (mt *matcher) search(buf []byte, emit func(ls, le int) bool) {
	pos := 0
	for pos < len(buf) {
		var at int
		switch {
		case mt.lit != nil:
			i := bytes.Index(buf[pos:], mt.lit)
			if i < 0 {
				return
			}
			at = pos + i
		case mt.perLine:
			at = pos
		default:
			loc := mt.re.FindIndex(buf[pos:])
			if loc == nil {
				return
			}
			at = pos + loc[0]
			if at == len(buf) && buf[at-1] == '\n' {
				return // past the newline that ends the last line: not a line
			}
		}
		ls := pos + bytes.LastIndexByte(buf[pos:at], '\n') + 1
		le := len(buf)
		if i := bytes.IndexByte(buf[at:], '\n'); i >= 0 {
			le = at + i
		}
		if mt.pure || mt.re.Match(buf[ls:le]) {
			if !emit(ls, le) {
				return
			}
		}
		pos = le + 1
	}
}

// requiredLiteral returns the longest literal (case-sensitive) that every match of re
// contains, or nil.
func requiredLiteral(re *syntax.Regexp) []byte {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return nil
		}
		return []byte(string(re.Rune))
	case syntax.OpCapture, syntax.OpPlus:
		return requiredLiteral(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return requiredLiteral(re.Sub[0])
		}
	case syntax.OpConcat:
		var best []byte
		for _, sub := range re.Sub {
			if l := requiredLiteral(sub); len(l) > len(best) {
				best = l
			}
		}
		return best
	}
	return nil
}

// usesTextAnchors reports whether re has \A or \z (^ and $ are line anchors here: the
// pattern is parsed in multi-line mode).
func usesTextAnchors(re *syntax.Regexp) bool {
	return re.Op == syntax.OpBeginText || re.Op == syntax.OpEndText || slices.ContainsFunc(re.Sub, usesTextAnchors)
}
