package pathmap

import (
	"cmp"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/fshost/fsroot"
)

// MaxSymlinks is the most symlinks one resolution follows, as Linux's own limit; one more
// is ErrLoop.
const MaxSymlinks = fsroot.MaxSymlinks

// Resolve maps a sandbox path from the sandbox to a checked location on the host.
//
// unsafeCwd is the request's working directory, a sandbox path ("" means Dir); it must
// resolve to an existing directory inside a mount. unsafePath may be absolute or relative
// to the cwd. The path is walked one component at a time from the mount roots' descriptors,
// as the kernel would walk it: "." is skipped, ".." goes up from where the walk actually is
// (so ".." after a symlink leaves the symlink's target), and every symlink is read and
// followed by the walk itself:
//
//   - a symlink's target is read as the host reads it: an absolute target from the host's
//     root, a relative one from the link's directory, ".." in it up through the host's
//     directories; where that lands in a mount's host directory, the walk goes on in that
//     mount (a link into another mount is followed);
//   - ".." of the sandbox's own path at a mount's root goes to the parent in the
//     sandbox's layout, where the kernel sees the mount;
//   - a sandbox path where a deeper mount sits is that mount (deeper mounts shadow).
//
// Nothing outside the mounts is ever looked at on the host disk: outside every mount the
// walk goes on by name only through the directories that lead to a mount (the parents of
// its sandbox path, or of its host directory for a symlink's target); any other name
// there, or a walk that ends outside, is refused with reason outside, as is a path
// relative to the sandbox home ("~"). A component that does not exist ends the
// disk walk: the rest must be plain names (not "..") and is kept as the Target's missing
// tail, so writes can create it. The final symlink is followed; see ResolveEntry for the
// symlink itself. More than MaxSymlinks symlinks: ErrLoop.
func (m *Map) Resolve(unsafeCwd, unsafePath string) (Target, error) {
	return m.resolve(unsafeCwd, unsafePath, false)
}

// ResolveEntry is Resolve for operations on a directory entry itself (a rename's source
// or destination): the last component is looked up but, if it is a symlink, not followed.
// A path whose last component is "." or "..", or that names a mount's root, is refused
// with reason invalid.
func (m *Map) ResolveEntry(unsafeCwd, unsafePath string) (Target, error) {
	return m.resolve(unsafeCwd, unsafePath, true)
}

func (m *Map) resolve(unsafeCwd, unsafePath string, entry bool) (Target, error) {
	if err := checkSyntax("map", unsafePath); err != nil {
		return Target{}, err
	}
	cwd := cmp.Or(unsafeCwd, m.dir)
	if err := checkSyntax("cwd", cwd); err != nil {
		return Target{}, err
	}
	if !filepath.IsAbs(cwd) {
		return Target{}, newErr("cwd", cwd, ErrInvalid, detail("cwd must be an absolute sandbox path"))
	}
	display := unsafePath
	if !filepath.IsAbs(display) {
		display = filepath.Join(cwd, unsafePath)
	}
	if !entry && !hasDotDot(cwd) && !hasDotDot(unsafePath) {
		if t, ok, err := m.fast(cwd, unsafePath, display); ok || err != nil {
			return t, err
		}
	}
	w := walker{m: m, op: "cwd", path: cwd}
	w.start()
	defer w.release()
	if err := w.run(userComps(split(cwd))); err != nil {
		return Target{}, err
	}
	switch {
	case w.mnt == nil:
		return Target{}, newErr("cwd", cwd, ErrOutside, nil)
	case w.tail != nil:
		return Target{}, newErr("cwd", cwd, ErrNotFound, nil)
	case w.typ != unix.S_IFDIR:
		return Target{}, newErr("cwd", cwd, ErrNotFound, detail("not a directory"))
	}
	w.op, w.path, w.hops = "map", display, 0
	if filepath.IsAbs(unsafePath) {
		w.release()
		w.start()
	}
	parts := split(unsafePath)
	if strings.HasSuffix(unsafePath, "/") && !entry {
		parts = append(parts, ".") // a trailing slash needs a directory, as in the kernel
	}
	var last string
	if entry {
		if len(parts) == 0 || parts[len(parts)-1] == "." || parts[len(parts)-1] == ".." {
			return Target{}, newErr("map", display, ErrInvalid, detail("path names no directory entry"))
		}
		last, parts = parts[len(parts)-1], parts[:len(parts)-1]
	}
	if err := w.run(userComps(parts)); err != nil {
		return Target{}, err
	}
	if entry {
		if err := w.entryStep(last); err != nil {
			return Target{}, err
		}
	}
	if w.mnt == nil {
		return Target{}, newErr("map", display, ErrOutside, nil)
	}
	return w.target(), nil
}

// fast resolves a path with no ".." whose cwd and path contain no symlinks, in one
// openat2 each. ok is false when the walk must decide (a symlink, a missing component).
func (m *Map) fast(cwd, unsafePath, display string) (t Target, ok bool, err error) {
	cc := comps(filepath.Clean(cwd))
	cm, crest := m.sandboxMount(cc)
	if cm == nil {
		return Target{}, false, newErr("cwd", cwd, ErrOutside, nil)
	}
	fd, err := openat2(cm.root, strings.Join(crest, "/"), unix.O_PATH|unix.O_DIRECTORY, 0, resolveStrict)
	if err != nil {
		return Target{}, false, nil
	}
	closeFd(fd)
	full := cc
	if filepath.IsAbs(unsafePath) {
		full = comps(filepath.Clean(unsafePath))
	} else {
		full = append(full[:len(full):len(full)], comps(filepath.Clean("/"+unsafePath))...)
	}
	fm, frest := m.sandboxMount(full)
	if fm == nil {
		return Target{}, false, newErr("map", display, ErrOutside, nil)
	}
	rel := strings.Join(frest, "/")
	fd, err = openat2(fm.root, rel, unix.O_PATH|unix.O_NOFOLLOW, 0, resolveStrict)
	if err != nil {
		return Target{}, false, nil
	}
	defer closeFd(fd)
	st, err := fstat(fd)
	if err != nil || fileType(&st) == unix.S_IFLNK {
		return Target{}, false, nil
	}
	if fileType(&st) != unix.S_IFDIR && (strings.HasSuffix(unsafePath, "/") || strings.HasSuffix(unsafePath, "/.") || unsafePath == ".") {
		return Target{}, false, nil // "file/" is not a directory: the walk says so
	}
	return Target{m: m, mnt: fm, rel: rel, typ: fileType(&st), dev: st.Dev, ino: st.Ino, size: st.Size}, true, nil
}

// comp is one path component still to walk.
type comp struct {
	name string
	// link: the component comes from a symlink's target, so ".." at a mount's root goes
	// to the host directory's parent (the host resolves links), not the sandbox's.
	link bool
}

// comps of a path the sandbox gave (link false).
func userComps(c []string) []comp {
	out := make([]comp, len(c))
	for i, s := range c {
		out[i] = comp{name: s}
	}
	return out
}

// walker is the state of one resolution.
type walker struct {
	m        *Map
	op, path string // for errors

	mnt  *mount   // the mount the walk is in; nil: outside every mount
	rel  []string // components below mnt's root, each resolved and no symlink
	vpos []string // outside every mount: sandbox components, or host ones if hostPos
	// hostPos: the position outside every mount is a host path (reached by a symlink),
	// not a sandbox path. Either way nothing there is looked at on disk.
	hostPos bool
	cur     int    // O_PATH descriptor of the directory at rel (mnt.root at the root)
	typ     uint32 // S_IFMT of the position (S_IFDIR at mount roots and outside)
	dev     uint64 // identity of the position on disk
	ino     uint64
	size    int64    // its size
	tail    []string // components that do not exist; non-nil once one was missing
	hops    int      // symlinks followed
}

// start puts the walk at the sandbox root.
func (w *walker) start() {
	w.cur = -1
	w.goTo(nil, nil)
}

// release closes the walk's own descriptor.
func (w *walker) release() {
	if w.mnt != nil && w.cur != w.mnt.root {
		closeFd(w.cur)
	}
	w.cur = -1
}

// enter puts the walk at the root of mount mm.
func (w *walker) enter(mm *mount) {
	w.release()
	w.mnt, w.rel, w.vpos, w.hostPos, w.tail = mm, nil, nil, false, nil
	w.cur, w.typ, w.dev, w.ino = mm.root, unix.S_IFDIR, 0, 0
}

// outside puts the walk at a position outside every mount.
func (w *walker) outside(pos []string, host bool) {
	w.release()
	w.mnt, w.rel, w.tail = nil, nil, nil
	w.vpos, w.hostPos, w.typ = append([]string(nil), pos...), host, unix.S_IFDIR
}

// goTo moves the walk to the sandbox path sp: the deepest mount holding sp becomes the
// position (at its root) and the components below it are put in front of queue to be
// walked on disk.
func (w *walker) goTo(sp []string, queue []comp) []comp {
	mm, rest := w.m.sandboxMount(sp)
	if mm == nil {
		w.outside(sp, false)
		return queue
	}
	w.enter(mm)
	return append(userComps(rest), queue...)
}

// goToHost moves the walk to the host path hp, as goTo does for sandbox paths: the mount
// whose host directory holds hp most deeply takes over, the rest to be walked on disk.
func (w *walker) goToHost(hp []string, queue []comp) []comp {
	hm := w.m.hostMount(hp, false)
	if hm == nil {
		w.outside(hp, true)
		return queue
	}
	w.enter(hm.mnt)
	rest := userComps(hp[hm.n:])
	for i := range rest {
		rest[i].link = true
	}
	return append(rest, queue...)
}

// sandbox returns the sandbox components of the position (in a mount, or outside).
func (w *walker) sandbox() []string {
	if w.mnt == nil {
		return w.vpos
	}
	sp := make([]string, 0, len(w.mnt.sbComps)+len(w.rel)+1)
	return append(append(sp, w.mnt.sbComps...), w.rel...)
}

// run walks the components of queue.
func (w *walker) run(queue []comp) error {
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		var err error
		queue, err = w.step(c, queue)
		if err != nil {
			return err
		}
	}
	return nil
}

// step walks one component and returns the queue to continue with.
func (w *walker) step(c comp, queue []comp) ([]comp, error) {
	switch {
	case w.tail == nil && w.typ != unix.S_IFDIR: // "." too: "file/" is not a directory
		return nil, newErr(w.op, w.path, ErrNotFound, detail("not a directory"))
	case c.name == "." || c.name == "":
		return queue, nil
	case w.tail != nil && c.name == "..":
		return nil, newErr(w.op, w.path, ErrNotFound, nil)
	case c.name == "..":
		switch {
		case w.mnt != nil && len(w.rel) > 0:
			return queue, w.up()
		case w.mnt != nil && c.link:
			return w.goToHost(parent(w.mnt.realComps), queue), nil
		case w.mnt != nil:
			return w.goTo(parent(w.mnt.sbComps), queue), nil
		case w.hostPos:
			return w.goToHost(parent(w.vpos), queue), nil
		}
		return w.goTo(parent(w.vpos), queue), nil
	case w.mnt == nil:
		// Outside every mount, only the directories that lead to a mount exist for the
		// walk: any other name leads outside (nothing there is looked at).
		pos := append(w.vpos[:len(w.vpos):len(w.vpos)], c.name)
		if !w.m.leadsToMount(pos, w.hostPos) {
			return nil, newErr(w.op, w.path, ErrOutside, nil)
		}
		if w.hostPos {
			return w.goToHost(pos, queue), nil
		}
		return w.goTo(pos, queue), nil
	}
	if mm := w.mountAt(c.name); mm != nil {
		w.enter(mm)
		return queue, nil
	}
	if w.tail != nil {
		w.tail = append(w.tail, c.name)
		return queue, nil
	}
	fd, err := openat2(w.cur, c.name, unix.O_PATH|unix.O_NOFOLLOW, 0, resolveStrict)
	if err == unix.ENOENT {
		w.tail = []string{c.name}
		return queue, nil
	}
	if err != nil {
		return nil, w.diskErr(err)
	}
	st, err := fstat(fd)
	if err != nil {
		closeFd(fd)
		return nil, w.diskErr(err)
	}
	switch fileType(&st) {
	case unix.S_IFLNK:
		target, err := readlinkFd(fd)
		closeFd(fd)
		if err != nil {
			return nil, w.diskErr(err)
		}
		return w.follow(target, queue)
	case unix.S_IFDIR:
		if w.cur != w.mnt.root {
			closeFd(w.cur)
		}
		w.cur = fd
	default:
		closeFd(fd)
	}
	w.rel = append(w.rel, c.name)
	w.typ, w.dev, w.ino, w.size = fileType(&st), st.Dev, st.Ino, st.Size
	return queue, nil
}

// mountAt returns the mount whose sandbox path is the position's (in a mount) with c
// appended, if any: a deeper mount covers whatever the host has at that place.
func (w *walker) mountAt(c string) *mount {
	if w.mnt == nil || !w.mnt.nested {
		return nil
	}
	sp := append(append(w.sandbox(), w.tail...), c)
	return w.m.bySandbox[joinComps("/", sp)]
}

// leadsToMount reports whether the components pos (a sandbox path, or a host path if
// host) are a mount's path or lie on the way to one or into one.
func (m *Map) leadsToMount(pos []string, host bool) bool {
	for _, mm := range m.mounts {
		if host {
			if hasPrefix(mm.realComps, pos) || hasPrefix(mm.hostComps, pos) || hasPrefix(pos, mm.realComps) || hasPrefix(pos, mm.hostComps) {
				return true
			}
		} else if hasPrefix(mm.sbComps, pos) || hasPrefix(pos, mm.sbComps) {
			return true
		}
	}
	return false
}

// parent returns the components of the parent ("/" is its own parent).
func parent(c []string) []string {
	if len(c) == 0 {
		return c
	}
	return c[:len(c)-1]
}

// up goes to the parent of a position below a mount root: a plain directory, so its
// parent is the one the walk came through.
func (w *walker) up() error {
	w.rel = w.rel[:len(w.rel)-1]
	rel := strings.Join(w.rel, "/")
	fd, err := openat2(w.mnt.root, rel, unix.O_PATH|unix.O_DIRECTORY, 0, resolveStrict)
	if err != nil {
		return w.diskErr(err)
	}
	st, err := fstat(fd)
	if err != nil {
		closeFd(fd)
		return w.diskErr(err)
	}
	if w.cur != w.mnt.root {
		closeFd(w.cur)
	}
	if len(w.rel) == 0 {
		closeFd(fd)
		fd = w.mnt.root
	}
	w.cur, w.typ, w.dev, w.ino = fd, unix.S_IFDIR, st.Dev, st.Ino
	return nil
}

// follow continues the walk at a symlink's target, read as the host reads it: an
// absolute target from the host's root, a relative one from the link's directory, and
// ".." in it through the host's directories. Outside every mount the walk goes on by
// name only, through the host directories that lead to a mount, without looking at the
// host disk; a target that names anything else there is refused.
func (w *walker) follow(target string, queue []comp) ([]comp, error) {
	w.hops++
	if w.hops > MaxSymlinks {
		return nil, newErr(w.op, w.path, ErrLoop, nil)
	}
	tc := split(target)
	if len(tc)+len(queue) > MaxPath {
		return nil, newErr(w.op, w.path, ErrInvalid, detail("path too long"))
	}
	link := userComps(tc)
	for i := range link {
		link[i].link = true
	}
	queue = append(link, queue...)
	if strings.HasPrefix(target, "/") {
		return w.goToHost(nil, queue), nil
	}
	return queue, nil
}

// entryStep looks up the last component of ResolveEntry without following a symlink.
func (w *walker) entryStep(c string) error {
	if w.mnt == nil && !w.hostPos {
		if _, ok := w.m.bySandbox[joinComps("/", append(w.vpos, c))]; ok {
			return newErr(w.op, w.path, ErrInvalid, detail("path names a mount's root"))
		}
	}
	if w.mountAt(c) != nil {
		return newErr(w.op, w.path, ErrInvalid, detail("path names a mount's root"))
	}
	switch {
	case w.mnt == nil:
		return newErr(w.op, w.path, ErrOutside, nil)
	case w.tail != nil:
		w.tail = append(w.tail, c)
		return nil
	case w.typ != unix.S_IFDIR:
		return newErr(w.op, w.path, ErrNotFound, detail("not a directory"))
	}
	fd, err := openat2(w.cur, c, unix.O_PATH|unix.O_NOFOLLOW, 0, resolveStrict)
	if err == unix.ENOENT {
		w.tail = []string{c}
		return nil
	}
	if err != nil {
		return w.diskErr(err)
	}
	st, err := fstat(fd)
	closeFd(fd)
	if err != nil {
		return w.diskErr(err)
	}
	w.rel = append(w.rel, c)
	w.typ, w.dev, w.ino, w.size = fileType(&st), st.Dev, st.Ino, st.Size
	return nil
}

// diskErr classifies an error from a lookup below a mount root. ELOOP and EXDEV there
// mean a component was swapped for a symlink after it was checked.
func (w *walker) diskErr(err error) error {
	if err == unix.ELOOP || err == unix.EXDEV {
		return newErr(w.op, w.path, ErrChanged, err)
	}
	return fromErrno(w.op, w.path, err)
}

// target returns the Target of the walk's position.
func (w *walker) target() Target {
	t := Target{m: w.m, mnt: w.mnt, rel: strings.Join(w.rel, "/"), typ: w.typ, dev: w.dev, ino: w.ino, size: w.size}
	if w.tail != nil {
		t.tail = append([]string(nil), w.tail...)
	}
	if len(w.rel) == 0 && t.tail == nil {
		t.typ = unix.S_IFDIR
	}
	return t
}

// split splits a path into its components, dropping empty ones; "." and ".." are kept.
func split(p string) []string {
	return slices.DeleteFunc(strings.Split(p, "/"), func(c string) bool { return c == "" })
}

// hasDotDot reports whether a path has a ".." component.
func hasDotDot(p string) bool {
	if !strings.Contains(p, "..") {
		return false
	}
	return slices.Contains(split(p), "..")
}
