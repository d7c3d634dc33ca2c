package workspaces

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The names inside one workspace directory, <state>/workspaces/<parent key>/<id>/.
const (
	infoName      = "workspace.json" // Info, 0600; written last by Create
	manifestName  = "manifest.json"  // the copied entries and their stat, 0600
	recordName    = "handback.json"  // the hand-back's Outcome, 0600; its presence ends it
	lockName      = "lock"           // flock'd during a hand-back
	baseName      = "base"           // the workspace as the child found it
	workName      = "work"           // the child's copy; after the hand-back a symlink to the parent
	conflictsName = "conflicts"      // the child's versions of conflicting paths
)

// maxIDLen is the longest workspace id.
const maxIDLen = 64

// ValidID returns nil when id can name a workspace: 1 to 64 bytes of [A-Za-z0-9._-], the
// first one a letter or digit. Such an id never holds "/" and is never "." or "..".
func ValidID(id string) error {
	if id == "" || len(id) > maxIDLen {
		return fmt.Errorf("workspace id %q: %w", id, ErrInvalidID)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return fmt.Errorf("workspace id %q: %w", id, ErrInvalidID)
		}
	}
	return nil
}

// ParentKey returns the directory name that groups the workspaces of one parent directory
// under <state>/workspaces: the parent's base name made safe (bytes outside [A-Za-z0-9._-]
// become "_", a leading "." or "-" becomes "_", cut to 32 bytes; "root" for "/"), "-", and the
// first 16 hex digits of the SHA-256 of the cleaned absolute path. Two parents with the
// same base name get different keys; the key is readable in a listing of the state dir.
func ParentKey(absParent string) string {
	clean := filepath.Clean(absParent)
	sum := sha256.Sum256([]byte(clean))
	name := filepath.Base(clean)
	if name == "/" || name == "." || name == "" {
		name = "root"
	}
	b := []byte(name)
	if len(b) > 32 {
		b = b[:32]
	}
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok || (i == 0 && (c == '.' || c == '-')) {
			b[i] = '_'
		}
	}
	return string(b) + "-" + hex.EncodeToString(sum[:8])
}

// Workspace is one child workspace on disk.
type Workspace struct {
	// ID names the workspace among its parent's workspaces.
	ID string `json:"id"`
	// Parent is the parent directory (absolute, symlinks resolved).
	Parent string `json:"parent"`
	// Dir is the workspace directory, <state>/workspaces/<ParentKey(Parent)>/<ID>.
	Dir string `json:"dir"`
	// Created is when Create finished.
	Created time.Time `json:"created"`
}

// Path is the child's working directory: its copy of the parent. After a hand-back it is
// a symlink to Parent.
func (w *Workspace) Path() string { return filepath.Join(w.Dir, workName) }

// Base is the copy of the parent as the child found it; gone after a hand-back.
func (w *Workspace) Base() string { return filepath.Join(w.Dir, baseName) }

// Conflicts is the directory holding the child's versions of conflicting paths.
func (w *Workspace) Conflicts() string { return filepath.Join(w.Dir, conflictsName) }

// info is the on-disk form of Workspace.
type info struct {
	Version int       `json:"version"`
	ID      string    `json:"id"`
	Parent  string    `json:"parent"`
	Created time.Time `json:"created"`
}

// Open returns the workspace at dir, which is either the workspace directory or the
// child's working directory (Workspace.Path) inside it. It fails with ErrNotWorkspace when
// neither holds a finished workspace.
func Open(dir string) (*Workspace, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open workspace %s: %w", dir, err)
	}
	// The workspace directory holding a "work" first: after a hand-back "work" is a link
	// to the parent, whose own files say nothing about the workspace.
	candidates := []string{abs}
	if filepath.Base(abs) == workName {
		candidates = []string{filepath.Dir(abs), abs}
	}
	for _, c := range candidates {
		data, err := os.ReadFile(filepath.Join(c, infoName))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("open workspace %s: %w", dir, err)
		}
		var in info
		if err := json.Unmarshal(data, &in); err != nil || in.Version != 1 || ValidID(in.ID) != nil || !filepath.IsAbs(in.Parent) {
			return nil, fmt.Errorf("open workspace %s: bad %s: %w", dir, infoName, ErrNotWorkspace)
		}
		return &Workspace{ID: in.ID, Parent: in.Parent, Dir: c, Created: in.Created}, nil
	}
	return nil, fmt.Errorf("open workspace %s: %w", dir, ErrNotWorkspace)
}

// safeRel checks a slash path from a listing: relative, no empty, "." or ".." element,
// nothing named ".git".
func safeRel(rel string) error {
	if rel == "" || strings.HasPrefix(rel, "/") {
		return fmt.Errorf("path %q: %w", rel, ErrUnsafePath)
	}
	for part := range strings.SplitSeq(rel, "/") {
		if part == "" || part == "." || part == ".." || part == ".git" {
			return fmt.Errorf("path %q: %w", rel, ErrUnsafePath)
		}
	}
	return nil
}
