package workspaces

import "io/fs"

// Kind is the type of a file-system entry in a Listing.
type Kind uint8

// The kinds of entry a Listing holds.
const (
	// KindFile is a regular file.
	KindFile Kind = iota + 1
	// KindSymlink is a symbolic link; its Content is the link target.
	KindSymlink
	// KindDir is a directory. A directory has no content of its own: its content is the
	// entries below it.
	KindDir
	// KindOther is anything else (a FIFO, socket or device). It is never copied or taken.
	KindOther
)

// String returns the kind's lowercase name.
func (k Kind) String() string {
	switch k {
	case KindFile:
		return "file"
	case KindSymlink:
		return "symlink"
	case KindDir:
		return "dir"
	case KindOther:
		return "other"
	}
	return "unknown"
}

// Entry is one path of a Listing. Two entries hold the same content exactly when their
// Kind, Mode and Content are equal (for directories only the Kind counts).
type Entry struct {
	// Kind is the entry's type.
	Kind Kind
	// Mode holds the permission bits (with setuid, setgid and sticky) of a file; zero for
	// other kinds.
	Mode fs.FileMode
	// Content identifies the bytes of a file or the target of a symlink: equal strings mean
	// equal content. It is opaque to Plan: a test may use the bytes themselves, the disk
	// hand-back uses labels it derived by stat and byte comparison.
	Content string
}

// same reports whether a and b (nil: absent) hold the same content.
func same(a, b *Entry) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if a.Kind != b.Kind {
		return false
	}
	if a.Kind == KindDir {
		return true
	}
	return a.Mode == b.Mode && a.Content == b.Content
}

// Listing maps a slash-separated path relative to a workspace root (no leading "/", no
// "." or ".." element) to its entry. A well-formed listing is a tree: no entry lies below
// a path whose entry is not a directory. Directories may be left out where nothing asks
// about them; Plan reads them only from the parent's listing.
type Listing map[string]Entry

// get returns the entry at p, or nil.
func (l Listing) get(p string) *Entry {
	if e, ok := l[p]; ok {
		return &e
	}
	return nil
}

// ancestors returns the proper ancestors of the slash path p, outermost first.
func ancestors(p string) []string {
	var out []string
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}
