package ui

import (
	"embed"
	"io/fs"
)

// assetsFS holds the page: index.html, app.js and app.css under assets/.
// They are plain files (vanilla JavaScript, no build step, no CDN), so the
// dashboard works offline.
//
//go:embed assets
var assetsFS embed.FS

// assets is the assets/ subtree of assetsFS: "index.html", "app.js" and
// "app.css" are at its root. The page loads its files from /assets/NAME.
var assets = func() fs.FS {
	sub, err := fs.Sub(assetsFS, "assets")
	if err != nil {
		panic("ui: embedded assets: " + err.Error())
	}
	return sub
}()
