package workspaces

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// manifestMagic opens a manifest file's first line; the clock times follow it. Version 2
// adds each file's base digest; version 1 (no digests: every base file is in base/) is
// still read.
const (
	manifestMagic   = "kennel-workspace-manifest 2"
	manifestMagicV1 = "kennel-workspace-manifest 1"
)

// mentry is one copied path: what the base holds, and the stat of the parent's entry and
// of the child's copy just after the copy was made. A hand-back that finds the same stat
// knows the entry unchanged without reading it.
type mentry struct {
	Path   string
	Kind   Kind        // KindFile or KindSymlink
	Mode   fs.FileMode // permission bits of a file
	Size   int64
	Target string // of a symlink
	Parent fingerprint
	Child  fingerprint
	// HasDigest says the base holds this file as Digest, the SHA-256 of its bytes, and
	// not as a file in base/.
	HasDigest bool
	Digest    [sha256.Size]byte
}

// manifest is the list of a workspace's copied paths, sorted by path.
//
// A stat proves a file unchanged only if a change after it would show: a write in the same
// tick of the file system's clock as the recorded stat may leave the times as they were.
// So the manifest keeps two readings of that clock: Start, taken before anything was read,
// and End, taken once the clock had moved past every copy's ctime. A parent entry whose
// recorded ctime is not before Start, or a child entry whose recorded ctime is not before
// End, is "racy" and compared by content, as git does with its index.
type manifest struct {
	Start, End int64 // file-system clock readings, nanoseconds
	entries    []mentry
	index      map[string]int
}

func (m *manifest) get(p string) *mentry {
	if i, ok := m.index[p]; ok {
		return &m.entries[i]
	}
	return nil
}

// encodeManifest writes entries one a line: numbers in decimal, the base digest in hex
// ("-" for none), the path and the target Go-quoted (so any byte, a tab or a newline
// included, survives).
func encodeManifest(start, end int64, entries []mentry) []byte {
	var b bytes.Buffer
	b.Grow(64 + 128*len(entries))
	fmt.Fprintf(&b, "%s %d %d\n", manifestMagic, start, end)
	num := func(v int64) {
		b.Write(strconv.AppendInt(b.AvailableBuffer(), v, 10))
		b.WriteByte(' ')
	}
	for _, e := range entries {
		num(int64(e.Kind))
		num(int64(e.Mode))
		num(e.Size)
		for _, f := range [2]fingerprint{e.Parent, e.Child} {
			num(int64(f.Dev))
			num(int64(f.Ino))
			num(f.Size)
			num(f.Mtime)
			num(f.Ctime)
			num(int64(f.Mode))
		}
		if e.HasDigest {
			b.Write(hex.AppendEncode(b.AvailableBuffer(), e.Digest[:]))
		} else {
			b.WriteByte('-')
		}
		b.WriteByte(' ')
		b.Write(strconv.AppendQuote(b.AvailableBuffer(), e.Path))
		b.WriteByte(' ')
		b.Write(strconv.AppendQuote(b.AvailableBuffer(), e.Target))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// errBadManifest is wrapped by decodeManifest's errors.
var errBadManifest = errors.New("bad manifest")

// decodeManifest reads what encodeManifest wrote. Any other input is an error wrapping
// ErrNotWorkspace.
func decodeManifest(data []byte) (*manifest, error) {
	head, rest, _ := bytes.Cut(data, []byte{'\n'})
	m := &manifest{index: map[string]int{}}
	magic := manifestMagic
	if bytes.HasPrefix(head, []byte(manifestMagicV1+" ")) {
		magic = manifestMagicV1
	}
	if n, err := fmt.Sscanf(string(head), magic+" %d %d", &m.Start, &m.End); n != 2 || err != nil || fmt.Sprintf("%s %d %d", magic, m.Start, m.End) != string(head) {
		return nil, fmt.Errorf("%w: header: %w", errBadManifest, ErrNotWorkspace)
	}
	digests := magic == manifestMagic
	sc := bufio.NewScanner(bytes.NewReader(rest))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		e, err := decodeEntry(sc.Text(), digests)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v: %w", errBadManifest, line+1, err, ErrNotWorkspace)
		}
		if _, dup := m.index[e.Path]; dup {
			return nil, fmt.Errorf("%w: line %d: path %q twice: %w", errBadManifest, line+1, e.Path, ErrNotWorkspace)
		}
		m.index[e.Path] = len(m.entries)
		m.entries = append(m.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v: %w", errBadManifest, err, ErrNotWorkspace)
	}
	return m, nil
}

// decodeEntry decodes one line of a manifest; with digests, one of version 2.
func decodeEntry(s string, digests bool) (mentry, error) {
	var e mentry
	var nums [15]int64
	for i := range nums {
		field, rest, ok := strings.Cut(s, " ")
		if !ok {
			return e, errors.New("short line")
		}
		v, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return e, err
		}
		nums[i], s = v, rest
	}
	var digest [sha256.Size]byte
	hasDigest := false
	if digests {
		field, rest, ok := strings.Cut(s, " ")
		if !ok {
			return e, errors.New("short line")
		}
		if field != "-" {
			if len(field) != hex.EncodedLen(sha256.Size) || strings.ToLower(field) != field {
				return e, errors.New("bad digest")
			}
			if _, err := hex.Decode(digest[:], []byte(field)); err != nil {
				return e, fmt.Errorf("digest: %w", err)
			}
			hasDigest = true
		}
		s = rest
	}
	p, rest, err := unquotePrefix(s)
	if err != nil {
		return e, fmt.Errorf("path: %w", err)
	}
	rest, ok := strings.CutPrefix(rest, " ")
	if !ok {
		return e, errors.New("no target")
	}
	target, rest, err := unquotePrefix(rest)
	if err != nil || rest != "" {
		return e, fmt.Errorf("target: bad quoting")
	}
	e = mentry{
		Path: p, Kind: Kind(nums[0]), Mode: fs.FileMode(nums[1]), Size: nums[2], Target: target,
		Parent:    fingerprint{uint64(nums[3]), uint64(nums[4]), nums[5], nums[6], nums[7], uint32(nums[8])},
		Child:     fingerprint{uint64(nums[9]), uint64(nums[10]), nums[11], nums[12], nums[13], uint32(nums[14])},
		HasDigest: hasDigest, Digest: digest,
	}
	if hasDigest && e.Kind != KindFile {
		return e, errors.New("a digest for a symlink")
	}
	if e.Kind != KindFile && e.Kind != KindSymlink {
		return e, fmt.Errorf("kind %d", nums[0])
	}
	if e.Mode&^(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 || e.Size < 0 {
		return e, errors.New("bad mode or size")
	}
	if err := safeRel(p); err != nil {
		return e, err
	}
	return e, nil
}

// unquotePrefix unquotes the Go string literal at the start of s.
func unquotePrefix(s string) (string, string, error) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", err
	}
	v, err := strconv.Unquote(q)
	return v, s[len(q):], err
}

// readManifest reads the manifest file name.
func readManifest(name string) (*manifest, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	return decodeManifest(data)
}
