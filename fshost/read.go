package fshost

import (
	"bytes"
	"context"
	"io"
	"unsafe"

	"github.com/kennel-dev/kennel/fshost/fsroot"
)

// ReadArgs are the arguments of fs.read.
type ReadArgs struct {
	// Path is the file's sandbox path, absolute or relative to Cwd. Required.
	Path string `json:"path"`
	// Offset is the first line to return, 0-based. Negative is invalid.
	Offset int `json:"offset"`
	// Limit is how many lines to return; 0 means as many as the bounds allow.
	Limit int `json:"limit"`
	// Cwd is the request's working directory (a sandbox path); "" means the session's.
	Cwd string `json:"cwd"`
}

// ReadResult is the reply of fs.read.
type ReadResult struct {
	// Absolute is the sandbox path of the file read (symlinks followed).
	Absolute string `json:"absolute"`
	// Content is the lines read, each with its newline (the last line of a file may have
	// none). Only when the first line alone is over the byte bound is it cut, at a rune
	// boundary.
	Content string `json:"content"`
	// Offset is the first line returned (the request's offset).
	Offset int `json:"offset"`
	// Lines is how many lines Content holds (a cut line counts).
	Lines int `json:"lines"`
	// TotalLines is the number of lines in the file (a last line without a newline counts).
	TotalLines int `json:"total_lines"`
	// Truncated reports that the bounds cut the reply short of what was asked (Limit
	// lines, or to the end of the file); NextOffset is then the line to ask for next.
	Truncated  bool `json:"truncated"`
	NextOffset int  `json:"next_offset,omitempty"`
}

// Read serves fs.read: a window of a text file's lines, bounded by ReadMaxBytes and
// ReadMaxLines. The whole file is read as a stream (to count its lines and check it is
// text: a NUL in its first 8 KiB or invalid UTF-8 anywhere is fsroot.ErrBinary): a file
// under 16 MiB in one read, a larger one in 1 MiB chunks, so memory stays bounded by the
// window whatever the file's size, on a local disk or over SFTP alike.
func (s *Server) Read(ctx context.Context, a ReadArgs) (*ReadResult, error) {
	const op = TypeRead
	if a.Path == "" {
		return nil, fail(op, "", fsroot.ErrInvalid, "path is required")
	}
	if a.Offset < 0 || a.Limit < 0 {
		return nil, fail(op, a.Path, fsroot.ErrInvalid, "offset and limit must not be negative")
	}
	f, info, err := s.root.Open(ctx, a.Cwd, a.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	limit, capped := s.opts.ReadMaxLines, true
	if a.Limit > 0 && a.Limit <= limit {
		limit, capped = a.Limit, false
	}
	w := window{offset: a.Offset, limit: limit, maxBytes: s.opts.ReadMaxBytes, whole: s.sizes.readWhole, chunk: s.sizes.readChunk}
	if err := w.scan(ctx, f, info.Size); err != nil {
		return nil, fail(op, info.Path, errClass(err), "%v", err)
	}
	if w.binary() {
		return nil, fail(op, info.Path, fsroot.ErrBinary, "")
	}
	r := &ReadResult{
		Absolute:   info.Path,
		Content:    w.content(),
		Offset:     a.Offset,
		Lines:      w.lines,
		TotalLines: w.total,
		Truncated:  w.cut || (capped && w.moreAfter),
	}
	if r.Truncated {
		r.NextOffset = a.Offset + w.lines
	}
	return r, nil
}

// window scans a file for the lines [offset, offset+limit), at most maxBytes of them.
type window struct {
	offset, limit, maxBytes int
	whole, chunk            int // read sizes (sizes.readWhole, sizes.readChunk)

	state     int    // skipping, collecting or counting
	line      int    // lines completed so far
	midLine   bool   // bytes seen since the last newline
	lines     int    // lines collected
	winStart  int64  // file offset of the window
	lineStart int64  // file offset of the line being collected
	out       []byte // the window's bytes
	owned     bool   // out is not an alias of a read buffer
	aliasOf   int    // size of the read buffer out aliases
	cut       bool   // the byte bound cut the window
	moreAfter bool   // the file has bytes after the window
	total     int
	nul       bool
	utf8      utf8Stream
}

const (
	skipping = iota
	collecting
	counting
)

// sizes are the read sizes of the handlers (fixed; tests make them small).
type sizes struct {
	readWhole int // the largest file fs.read reads in one buffer (the window aliases it)
	readChunk int // fs.read's read size for larger files
	grepWhole int // the largest file fs.grep reads in one piece
	grepChunk int // fs.grep's first read size for larger files (lines are kept whole)
}

var defaultSizes = sizes{readWhole: 16 << 20, readChunk: 1 << 20, grepWhole: 32 << 20, grepChunk: 1 << 20}

// scan reads f, of size bytes when opened (negative: unknown), to its end.
func (w *window) scan(ctx context.Context, f io.Reader, size int64) error {
	if w.offset == 0 {
		w.state = collecting // winStart and lineStart are 0
	}
	bufSize := int64(w.chunk)
	if size >= 0 && size < int64(w.whole) {
		bufSize = size + 1 // one read gets it all; one more byte sees the end
	}
	buf := make([]byte, bufSize)
	var off int64
	for {
		if buf == nil {
			buf = make([]byte, w.chunk)
		}
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			chunk := buf[:n]
			w.nul = w.nul || hasNUL(chunk, off)
			w.utf8.write(chunk)
			aliased := w.feed(chunk, off)
			off += int64(n)
			if aliased {
				buf = nil // out points into buf: never write it again
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	w.finish()
	return nil
}

// feed processes one chunk at file offset base. It reports whether w.out now aliases
// the chunk's storage. The window's bytes in the chunk are taken in one piece, so a
// window that lies in one chunk is never copied.
func (w *window) feed(c []byte, base int64) (aliased bool) {
	p, from := 0, -1 // from: start in c of window bytes not yet taken
	flush := func(to int) {
		if from >= 0 && to > from {
			aliased = w.take(c, from, to, aliased)
		}
		from = -1
	}
	for p < len(c) {
		switch w.state {
		case skipping:
			i := bytes.IndexByte(c[p:], '\n')
			if i < 0 {
				w.midLine = true
				return aliased
			}
			p += i + 1
			w.line++
			w.midLine = false
			if w.line == w.offset {
				w.state = collecting
				w.winStart, w.lineStart = base+int64(p), base+int64(p)
			}
		case collecting:
			if from < 0 {
				from = p
			}
			if rest := c[p:]; base+int64(len(c))-w.winStart <= int64(w.maxBytes) {
				// The rest of the chunk fits the byte bound: if its lines fit the line
				// bound too, take it all at once.
				if n := bytes.Count(rest, nl); w.lines+n < w.limit {
					if n > 0 {
						w.lineStart = base + int64(p+bytes.LastIndexByte(rest, '\n')+1)
					}
					w.line += n
					w.lines += n
					w.midLine = rest[len(rest)-1] != '\n'
					p = len(c)
					continue
				}
			}
			i := bytes.IndexByte(c[p:], '\n')
			end := len(c)
			if i >= 0 {
				end = p + i + 1
			}
			if base+int64(end)-w.winStart > int64(w.maxBytes) {
				// The byte bound ends the window in this line.
				if w.lineStart == w.winStart {
					flush(int(w.winStart + int64(w.maxBytes) - base))
					w.out = trimPartialRune(w.out)
					w.lines = 1
				} else {
					flush(p)
					w.out = w.out[:w.lineStart-w.winStart]
				}
				w.cut = true
				w.state = counting
				continue // count this chunk from p: the line in progress is still to finish
			}
			if i < 0 {
				w.midLine = true
				flush(len(c))
				return aliased
			}
			p = end
			w.line++
			w.lines++
			w.midLine = false
			w.lineStart = base + int64(p)
			if w.lines == w.limit {
				flush(p)
				w.state = counting
			}
		case counting:
			rest := c[p:]
			w.moreAfter = true
			w.line += bytes.Count(rest, nl)
			w.midLine = rest[len(rest)-1] != '\n'
			return aliased
		}
	}
	flush(p)
	return aliased
}

// take adds c[from:to] to the window, aliasing the chunk when it is the first piece.
func (w *window) take(c []byte, from, to int, aliased bool) bool {
	switch {
	case from == to:
		return aliased
	case w.out == nil:
		w.out = c[from:to:to]
		w.aliasOf = cap(c)
		return true
	}
	w.out = append(w.out, c[from:to]...)
	w.owned = true
	return aliased
}

// finish ends the scan at the end of the file.
func (w *window) finish() {
	w.total = w.line
	if w.midLine {
		w.total++
		if w.state == collecting {
			w.lines++
		}
	}
}

// binary reports whether the file scanned is not text.
func (w *window) binary() bool { return w.nul || !w.utf8.valid() }

// content returns the window as a string without copying a large aliased window (the
// buffer it aliases is never written again).
func (w *window) content() string {
	if len(w.out) == 0 {
		return ""
	}
	if !w.owned && len(w.out) >= 4096 && len(w.out) >= w.aliasOf/4 {
		return unsafe.String(unsafe.SliceData(w.out), len(w.out))
	}
	return string(w.out)
}
