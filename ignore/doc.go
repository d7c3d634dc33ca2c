// Package ignore walks a directory tree the way git sees its untracked
// files: it skips .git and whatever the tree's .gitignore files ignore.
// Walk lists a local directory, through descriptors; WalkFS lists any
// fs.FS (a remote tree over SFTP, an archive, fstest.MapFS) by the same
// code, so both answer the same for the same tree.
//
// The rules are git's (gitignore(5), dir.c and wildmatch.c), checked
// against git itself by this package's tests: each .gitignore applies to
// its own directory and below; within the files that apply, the last
// matching pattern of the deepest file decides; "!" re-includes, except
// that nothing inside an ignored directory can be re-included; "dir/"
// matches directories only (a symlink is not one); a pattern with a slash
// is anchored to its .gitignore's directory; "**" spans directories;
// comments, escapes, trailing spaces, CRLF lines and a UTF-8 BOM are read
// as git reads them.
//
// Only .gitignore files inside the tree count. .git/info/exclude,
// core.excludesFile and the global excludes never apply: a workspace's
// hand-back listing must depend on the child's .gitignore files alone, so a
// file that only those other sources ignore is listed.
//
// Listing a tree's files without git:
//
//	err := ignore.Walk(ctx, dir, func(rel string, d fs.DirEntry) error {
//		if !d.IsDir() {
//			files = append(files, rel) // regular files and symlinks
//		}
//		return nil
//	})
//
// The same over an fs.FS, from its top:
//
//	err := ignore.WalkFS(ctx, fsys, ".", func(rel string, d fs.DirEntry) error { ... })
//
// A .gitignore that is not a regular file (a symlink is not followed, as
// in git; a FIFO is not opened) or is larger than MaxFileSize counts as
// empty, and no more than MaxFileSize+1 bytes of one are read.
//
// Matching is a port of git's own code (wildmatch.c, and match_basename
// and match_pathname in dir.c), quirks included, and is checked against
// git by the tests. It is not github.com/go-git/go-git's
// plumbing/format/gitignore, which answers differently from git in common
// cases: its patterns also match a path's parent directories, so "*",
// "!*/", "!*.txt" keeps every file below a directory; "foo/**" ignores foo
// itself; "[!a]" is not a negated class; "?" matches a rune, not a byte.
//
// The cost of a walk is the number of entries times the number of
// patterns that apply to them; a hostile tree can make that large, so
// bound it with the walk's context.
package ignore
