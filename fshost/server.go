package fshost

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"slices"

	"github.com/kennel-dev/kennel/fshost/fsroot"
)

// The request types a Server serves.
const (
	TypeRead  = "fs.read"
	TypeWrite = "fs.write"
	TypeEdit  = "fs.edit"
	TypeGrep  = "fs.grep"
	TypeGlob  = "fs.glob"
)

// Default bounds (Options zero values).
const (
	DefaultReadMaxBytes   = 50 << 10
	DefaultReadMaxLines   = 2000
	DefaultGrepMaxMatches = 1000
	DefaultGrepMaxBytes   = 50 << 10
	DefaultGlobMaxResults = 1000
	DefaultMaxEditBytes   = 64 << 20
	DefaultMaxLineBytes   = 1000
)

// Options bound what a Server reads and returns. The zero value of each field means its
// default; a negative value means no bound (for tests and benchmarks: a kernel's request
// can then make the host read a whole file into memory).
type Options struct {
	// ReadMaxBytes bounds the content of one fs.read reply (default 50 KiB).
	ReadMaxBytes int
	// ReadMaxLines bounds the lines of one fs.read reply (default 2000).
	ReadMaxLines int
	// GrepMaxMatches bounds the matches of one fs.grep reply (default 1000).
	GrepMaxMatches int
	// GrepMaxBytes bounds the paths and texts of one fs.grep reply (default 50 KiB).
	GrepMaxBytes int
	// MaxLineBytes bounds each line text in an fs.grep reply (default 1000 bytes).
	MaxLineBytes int
	// GlobMaxResults bounds the paths of one fs.glob reply (default 1000).
	GlobMaxResults int
	// MaxEditBytes is the largest file fs.edit reads whole (default 64 MiB).
	MaxEditBytes int
	// Workers is how many files fs.grep reads and searches at once (default
	// min(4, 2*GOMAXPROCS)).
	Workers int
}

// bound resolves an Options field: 0 is def, negative is "no bound".
func bound(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return int(^uint(0) >> 1)
	}
	return v
}

// Server serves the fs.* host requests of one session's kernel through its Root (a
// pathmap.Map, an ssh.FS). Every path argument and the cwd are resolved by the Root,
// which refuses what leads outside, before a handler reads or writes anything, and every
// path in a reply is a sandbox path. A Server is safe for concurrent use; it holds no
// state between requests.
type Server struct {
	root  fsroot.Root
	opts  Options
	sizes sizes
}

// New returns a Server over root. root must stay open while the Server is used.
func New(root fsroot.Root, opts Options) *Server {
	opts.ReadMaxBytes = bound(opts.ReadMaxBytes, DefaultReadMaxBytes)
	opts.ReadMaxLines = bound(opts.ReadMaxLines, DefaultReadMaxLines)
	opts.GrepMaxMatches = bound(opts.GrepMaxMatches, DefaultGrepMaxMatches)
	opts.GrepMaxBytes = bound(opts.GrepMaxBytes, DefaultGrepMaxBytes)
	opts.MaxLineBytes = bound(opts.MaxLineBytes, DefaultMaxLineBytes)
	opts.GlobMaxResults = bound(opts.GlobMaxResults, DefaultGlobMaxResults)
	opts.MaxEditBytes = bound(opts.MaxEditBytes, DefaultMaxEditBytes)
	if opts.Workers <= 0 {
		opts.Workers = min(4, 2*runtime.GOMAXPROCS(0))
	}
	return &Server{root: root, opts: opts, sizes: defaultSizes}
}

// Serves reports whether typ is a request type this Server answers: fs.read, fs.write,
// fs.edit, fs.grep and fs.glob.
func (s *Server) Serves(typ string) bool {
	return slices.Contains([]string{TypeRead, TypeWrite, TypeEdit, TypeGrep, TypeGlob}, typ)
}

// Serve answers one request of type typ with JSON arguments args. The result marshals to
// the reply's JSON result; an error has a Code (see Describe) and means nothing was
// changed, except where a handler says otherwise (fs.edit's moves). ctx bounds fs.grep
// and fs.glob walks.
func (s *Server) Serve(ctx context.Context, typ string, args json.RawMessage) (result any, err error) {
	switch typ {
	case TypeRead:
		return serve(ctx, typ, args, s.Read)
	case TypeWrite:
		return serve(ctx, typ, args, s.Write)
	case TypeEdit:
		return serve(ctx, typ, args, s.Edit)
	case TypeGrep:
		return serve(ctx, typ, args, s.Grep)
	case TypeGlob:
		return serve(ctx, typ, args, s.Glob)
	}
	return nil, fail("serve", "", fsroot.ErrUnserved, "type %q", cutUTF8(typ, 64))
}

// serve decodes a request's arguments into A and runs handler h on them. Its result is
// nil (not a typed nil) with an error.
func serve[A, R any](ctx context.Context, typ string, args json.RawMessage, h func(context.Context, A) (*R, error)) (any, error) {
	var a A
	if err := decode(typ, args, &a); err != nil {
		return nil, err
	}
	r, err := h(ctx, a)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// decode unmarshals a request's arguments: a JSON object (null or absent is {}).
// Unknown fields are ignored.
func decode(typ string, args json.RawMessage, v any) error {
	args = bytes.TrimSpace(args)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		return nil
	}
	if err := json.Unmarshal(args, v); err != nil {
		return fail(typ, "", fsroot.ErrInvalid, "arguments: %s", cutUTF8(err.Error(), 200))
	}
	return nil
}
