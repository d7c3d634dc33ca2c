// Package layout holds no code: its tests keep the repository's shape honest. Every
// package has a package doc; the controller imports no concrete transport; no package is
// named util, utils, common or helpers.
package layout
