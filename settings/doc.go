// Package settings reads and writes kennel's settings documents: settings.json in the
// global config directory (GlobalDir: $KENNEL_CONFIG_DIR, else $XDG_CONFIG_HOME/kennel,
// else ~/.config/kennel) and in a project (.kennel/settings.json below its root).
//
// One table declares every key (LookupKey reads it): its id, the value it holds, its scope
// (global-only or project-allowed) and whether it runs code or sets a limit. A key no
// entry declares is reported, never applied.
//
//	r, err := settings.Load(settings.LoadOptions{ProjectDir: "/home/me/project"})
//	if err != nil { ... } // no home directory
//	for _, p := range r.Problems {
//		log.Print(p) // each bad leaf, undeclared key, unreadable file and withheld key
//	}
//	kt, err := r.KernelTransport() // nil: local kernels; an error: start none
//
// # Reading: no input lost in silence
//
// Each leaf of a document applies or is named by a Problem with its JSON pointer
// ("/kernelTransport/pathMap/0/readOnly") and class (ErrBadValue, ErrUndeclared); a bad
// leaf drops only itself. Where dropping a part would change what a value means, the
// leaf is the whole: an argvPrefix with a bad element is dropped whole (an argv missing
// a word is another command), and a pathMap mount with a bad or unknown field is dropped
// whole (a mount missing its readOnly would share more than was written). A file that
// cannot be read (not JSON, not an object, a duplicate key, an unknown version, not a
// regular file, over MaxFileSize, writable by every user, owned by another user but
// root) applies nothing and is one Problem (ErrUnreadable).
//
// # Trust
//
// The global file's values come first; a project's entry of a key replaces the global
// one whole (kernelTransport is one unit: a project never takes a field of the global
// entry). A project is untrusted unless the global trustedProjects names its directory.
// An untrusted project sets no key that runs code (kernelTransport) and no limit
// (truncation); no project sets a global-only key (trustedProjects). Each key withheld
// is a Problem (ErrWithheld) that names it and the fix. Result.KernelTransport fails
// closed: an unreadable file that could set the transport, or a unit that cannot start a
// kernel as written, is an error, never a fall-back to local kernels.
//
// # Writing
//
// Doc.Set and Doc.Unset read the document on disk under a lock (flock on a lock file
// beside it, so concurrent writers in any process each land), change one key (a dotted
// path: "kernelTransport.python"), keep every other key as written (undeclared and bad
// ones included, in their order), and replace the file atomically (a new file renamed
// over it, mode 0600, in a 0700 directory). A file they cannot read or parse is never
// written over: they return the error. A value its setting does not hold is refused
// with the Problem that names the leaf.
package settings
