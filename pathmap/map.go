package pathmap

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/fshost/fsroot"
	"github.com/kennel-dev/kennel/ignore"
)

// Mount is one host directory seen inside the sandbox at another (or the same) path.
type Mount struct {
	// Sandbox is the absolute path of the directory inside the sandbox.
	Sandbox string `json:"sandbox"`
	// Host is the absolute path of the directory on the host. It must exist when the Map
	// is made; the directory found then is the one served for the Map's lifetime.
	Host string `json:"host"`
	// ReadOnly refuses writes, edits and renames below the mount (reason read_only).
	ReadOnly bool `json:"readOnly,omitempty"`
}

// Config describes a session's path map.
type Config struct {
	// Dir is the session's working directory on the host (absolute). Required. The kernel
	// starts in its sandbox path (Map.Dir); a Dir outside every mount makes New fail.
	Dir string
	// Mounts lists the shared directories. Nil or empty means the identity map: Dir,
	// read-write, at its own absolute path inside the sandbox.
	Mounts []Mount
	// Owner is the uid:gid that the files and directories the Map creates belong to
	// (Target.WriteFile, Rename: new files, new parent directories, a file copied
	// across file systems when its own owner cannot be kept); set it to the uid:gid the
	// kernel runs as, so they are owned like the files the kernel writes itself. Nil
	// means the controller's own uid and group (no chown). A file replaced by WriteFile
	// keeps its own owner and mode either way; existing directories are never changed.
	//
	// Another uid:gid than the controller's needs CAP_CHOWN (root has it): without it,
	// New refuses the Owner with ErrDenied rather than leave files with the wrong
	// owner. When a chown fails later anyway (an id the file system or user namespace
	// cannot hold, a privilege dropped since), the write fails with ErrDenied and
	// leaves nothing.
	Owner *Owner
	// Walk lists the trees Map.WalkDir walks (fs.grep, fs.glob). Nil means ignore.Walk:
	// .git and what .gitignore files ignore are skipped, symlinks are never followed.
	Walk WalkFunc
}

// Map maps sandbox paths to host paths and back across a fixed list of mounts, and
// refuses every path that leads outside them. It holds one O_PATH descriptor per mount
// (the mount's root, resolved when the Map is made): every file the package opens is
// opened beneath one of those descriptors.
//
// A Map is safe for concurrent use. Close releases the descriptors; no method may be
// called during or after Close.
type Map struct {
	mounts    []*mount          // deepest sandbox path first, then by sandbox path
	bySandbox map[string]*mount // by cleaned sandbox path
	dir       string            // sandbox path of Config.Dir
	owner     *Owner            // Config.Owner (a copy), nil for the controller's own
	list      WalkFunc          // Config.Walk, or ignore.Walk: how trees are listed
}

// mount is a Mount with its resolved root.
type mount struct {
	Mount              // cleaned paths
	real      string   // the resolved host directory (symlinks of Host evaluated)
	sbComps   []string // components of Sandbox
	hostComps []string // components of Host
	realComps []string // components of real
	root      int      // O_PATH|O_DIRECTORY descriptor of real
	nested    bool     // another mount's sandbox path lies below this one's
}

// New checks the mounts, opens their roots and returns the Map. Every mount needs absolute
// paths, an existing host directory and a sandbox path no other mount has. The working
// directory must lie inside a mount (lexically and once its symlinks are resolved), else
// New fails with reason outside: the session must not start. An Owner out of range is
// refused with ErrInvalid, one the process cannot give files to with ErrDenied (see
// Config.Owner).
func New(cfg Config) (*Map, error) {
	if cfg.Dir == "" || !filepath.IsAbs(cfg.Dir) {
		return nil, newErr("start", cfg.Dir, ErrInvalid, detail("working directory must be an absolute host path"))
	}
	var owner *Owner
	if cfg.Owner != nil {
		if err := checkOwner(*cfg.Owner); err != nil {
			return nil, err
		}
		o := *cfg.Owner
		owner = &o
	}
	mounts := cfg.Mounts
	if len(mounts) == 0 {
		d := filepath.Clean(cfg.Dir)
		mounts = []Mount{{Sandbox: d, Host: d}}
	}
	m := &Map{bySandbox: make(map[string]*mount, len(mounts)), owner: owner, list: cfg.Walk}
	if m.list == nil {
		m.list = ignore.Walk
	}
	ok := false
	defer func() {
		if !ok {
			m.Close()
		}
	}()
	for _, mt := range mounts {
		mm, err := openMount(mt)
		if err != nil {
			return nil, err
		}
		if _, dup := m.bySandbox[mm.Sandbox]; dup {
			unix.Close(mm.root)
			return nil, newErr("mount", mt.Sandbox, ErrInvalid, detail("two mounts at one sandbox path"))
		}
		m.bySandbox[mm.Sandbox] = mm
		m.mounts = append(m.mounts, mm)
	}
	for _, a := range m.mounts {
		for _, b := range m.mounts {
			if len(b.sbComps) > len(a.sbComps) && hasPrefix(b.sbComps, a.sbComps) {
				a.nested = true
			}
		}
	}
	slices.SortFunc(m.mounts, func(a, b *mount) int {
		if d := len(b.sbComps) - len(a.sbComps); d != 0 {
			return d
		}
		return strings.Compare(a.Sandbox, b.Sandbox)
	})
	dir, err := m.startDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	m.dir = dir
	ok = true
	return m, nil
}

// openMount validates one mount and opens its resolved root.
func openMount(mt Mount) (*mount, error) {
	if !filepath.IsAbs(mt.Sandbox) || !filepath.IsAbs(mt.Host) {
		return nil, newErr("mount", mt.Sandbox, ErrInvalid, detail("mount paths must be absolute"))
	}
	if strings.ContainsRune(mt.Sandbox, 0) || strings.ContainsRune(mt.Host, 0) {
		return nil, newErr("mount", mt.Sandbox, ErrInvalid, detail("NUL byte in mount path"))
	}
	mm := &mount{Mount: Mount{
		Sandbox:  filepath.Clean(mt.Sandbox),
		Host:     filepath.Clean(mt.Host),
		ReadOnly: mt.ReadOnly,
	}}
	real, err := filepath.EvalSymlinks(mm.Host)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", mm.Sandbox, fromErrno("mount", mm.Sandbox, err))
	}
	mm.real = real
	fd, err := unix.Open(real, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", mm.Sandbox, fromErrno("mount", mm.Sandbox, err))
	}
	// openat2 is required (Linux 5.6): without it nothing can be opened safely.
	probe, err := openat2(fd, ".", unix.O_PATH, 0, resolveStrict)
	if err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.ENOSYS) {
			return nil, fmt.Errorf("mount %s: openat2 unavailable (Linux 5.6 or later needed): %w", mm.Sandbox, newErr("mount", mm.Sandbox, ErrInternal, err))
		}
		return nil, fmt.Errorf("mount %s: %w", mm.Sandbox, fromErrno("mount", mm.Sandbox, err))
	}
	unix.Close(probe)
	mm.root = fd
	mm.sbComps = comps(mm.Sandbox)
	mm.hostComps = comps(mm.Host)
	mm.realComps = comps(real)
	return mm, nil
}

// Close releases the mounts' descriptors. It is safe to call more than once.
func (m *Map) Close() error {
	for _, mm := range m.mounts {
		if mm.root >= 0 {
			unix.Close(mm.root)
			mm.root = -1
		}
	}
	return nil
}

// Owner returns the uid:gid the Map gives the files and directories it creates, and false
// when they stay the controller's own (Config.Owner nil).
func (m *Map) Owner() (Owner, bool) {
	if m.owner == nil {
		return Owner{}, false
	}
	return *m.owner, true
}

// Dir is the sandbox path of the session's working directory: where the kernel starts,
// and the cwd of a request that names none.
func (m *Map) Dir() string { return m.dir }

// Mounts returns the mounts (cleaned), deepest sandbox path first.
func (m *Map) Mounts() []Mount {
	out := make([]Mount, len(m.mounts))
	for i, mm := range m.mounts {
		out[i] = mm.Mount
	}
	return out
}

// startDir maps the host working directory to its sandbox path, refusing one outside
// every mount, lexically or once its symlinks are resolved on the host.
func (m *Map) startDir(hostDir string) (string, error) {
	sb, err := m.ToSandbox(hostDir)
	if err != nil {
		return "", newErr("start", "", ErrOutside, detail("working directory is outside every mount"))
	}
	real, err := filepath.EvalSymlinks(hostDir)
	if err != nil {
		return "", fromErrno("start", sb, err)
	}
	if m.hostMount(comps(real), true) == nil {
		return "", newErr("start", sb, ErrOutside, detail("working directory resolves outside every mount"))
	}
	return sb, nil
}

// StartDir returns the sandbox path a kernel started in the host directory hostDir
// begins in, or an error with reason outside when no mount holds hostDir (lexically,
// or once its symlinks are resolved). New applies it to Config.Dir.
func (m *Map) StartDir(hostDir string) (string, error) {
	if !filepath.IsAbs(hostDir) {
		return "", newErr("start", "", ErrInvalid, detail("working directory must be an absolute host path"))
	}
	return m.startDir(hostDir)
}

// ToHost maps a sandbox path to its host path lexically (no disk access): the path is
// cleaned and the deepest mount holding it maps it. A relative path, a path starting with
// "~", or one outside every mount is refused with reason outside. Use Resolve to check the
// path on the host disk too; ToHost is for display and configuration, not for opening.
func (m *Map) ToHost(unsafePath string) (string, error) {
	if err := checkSyntax("map", unsafePath); err != nil {
		return "", err
	}
	if !filepath.IsAbs(unsafePath) {
		return "", newErr("map", unsafePath, ErrOutside, detail("not an absolute sandbox path"))
	}
	p := filepath.Clean(unsafePath)
	mm, rest := m.sandboxMount(comps(p))
	if mm == nil {
		return "", newErr("map", p, ErrOutside, nil)
	}
	return joinComps(mm.Host, rest), nil
}

// ToSandbox maps a host path to its sandbox path lexically: the path is cleaned and the
// mount whose host directory (as configured, or resolved) holds it most deeply maps it.
// A path no mount holds, or whose sandbox path a deeper mount covers (the sandbox cannot
// see it), is refused with reason outside. Host paths are the host's own
// facts (configuration, environment), not sandbox input.
func (m *Map) ToSandbox(hostPath string) (string, error) {
	if !filepath.IsAbs(hostPath) || strings.ContainsRune(hostPath, 0) {
		return "", newErr("map", "", ErrInvalid, detail("not an absolute host path"))
	}
	c := comps(filepath.Clean(hostPath))
	hm := m.hostMount(c, false)
	if hm == nil {
		return "", newErr("map", "", ErrOutside, nil)
	}
	sb := joinComps(hm.mnt.Sandbox, c[hm.n:])
	if mm, _ := m.sandboxMount(comps(sb)); mm != hm.mnt {
		// A deeper mount covers that sandbox path: the sandbox cannot see this host path.
		return "", newErr("map", "", ErrOutside, detail("hidden by a deeper mount"))
	}
	return sb, nil
}

// sandboxMount returns the deepest mount whose sandbox path holds the cleaned components
// c, and the components below it.
func (m *Map) sandboxMount(c []string) (*mount, []string) {
	for _, mm := range m.mounts { // deepest first
		if hasPrefix(c, mm.sbComps) {
			return mm, c[len(mm.sbComps):]
		}
	}
	return nil, nil
}

// hostMatch is a mount found by host path, with n the number of components it matched.
type hostMatch struct {
	mnt *mount
	n   int
}

// hostMount returns the mount whose host directory holds the components c most deeply,
// matching the resolved directory and, unless realOnly, the configured one too.
func (m *Map) hostMount(c []string, realOnly bool) *hostMatch {
	var best *hostMatch
	for _, mm := range m.mounts {
		n := -1
		if hasPrefix(c, mm.realComps) {
			n = len(mm.realComps)
		}
		if !realOnly && hasPrefix(c, mm.hostComps) && len(mm.hostComps) > n {
			n = len(mm.hostComps)
		}
		if n >= 0 && (best == nil || n > best.n) {
			best = &hostMatch{mm, n}
		}
	}
	return best
}

// comps splits a cleaned absolute path into its components ("/" has none).
func comps(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// hasPrefix reports whether prefix is a leading run of c, component by component.
func hasPrefix(c, prefix []string) bool {
	return len(prefix) <= len(c) && slices.Equal(c[:len(prefix)], prefix)
}

// joinComps appends components to an absolute base path.
func joinComps(base string, c []string) string {
	if len(c) == 0 {
		return base
	}
	if base == "/" {
		base = ""
	}
	return base + "/" + strings.Join(c, "/")
}

// MaxPath is the longest path (in bytes) the map accepts, as the host's PATH_MAX.
const MaxPath = fsroot.MaxPath

// checkSyntax refuses what can never be a usable sandbox path (fsroot.CheckPath): empty,
// a NUL byte, longer than MaxPath, or relative to the sandbox home ("~", "~/x", "~user/x").
func checkSyntax(op, unsafePath string) error { return fsroot.CheckPath(op, unsafePath) }
