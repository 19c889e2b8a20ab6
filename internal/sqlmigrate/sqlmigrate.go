// Package sqlmigrate reads the numbered SQL migrations the SQL stores
// embed (NNN_name.up.sql and NNN_name.down.sql), for pgoutbox, mysqloutbox,
// pginbox and mysqlinbox: what they share before each renders and runs the
// files its own way.
package sqlmigrate

import (
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Migration is one numbered migration.
type Migration struct {
	Version  int
	Name     string
	Up, Down string
}

var fileName = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.(up|down)\.sql$`)

// Sub returns the subtree dir of f; it panics when dir is not a valid
// path, a defect of the build.
func Sub(f fs.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return s
}

// Load reads the migrations at the root of fsys, oldest first. pkg names
// the caller in the error for a file whose name does not fit
// NNN_name.(up|down).sql.
func Load(fsys fs.FS, pkg string) ([]Migration, error) {
	files, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, f := range files {
		m := fileName.FindStringSubmatch(f.Name())
		if m == nil {
			return nil, fmt.Errorf("%s: unexpected migration file %q (want NNN_name.up.sql or NNN_name.down.sql)", pkg, f.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(fsys, f.Name())
		if err != nil {
			return nil, err
		}
		mg := byVersion[v]
		if mg == nil {
			mg = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mg
		}
		if m[3] == "up" {
			mg.Up = string(body)
		} else {
			mg.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	return out, nil
}

// MustLoad is Load for embedded files, where a misnamed file is a defect
// of the build: it panics.
func MustLoad(fsys fs.FS, pkg string) []Migration {
	ms, err := Load(fsys, pkg)
	if err != nil {
		panic(err)
	}
	return ms
}

// The lines goose puts around a statement whose body holds semicolons (a
// stored procedure): Statements keeps the lines between them together.
const (
	StatementBegin = "-- +goose StatementBegin"
	StatementEnd   = "-- +goose StatementEnd"
)

// Statements splits a rendered migration into its statements, without
// their final semicolon and without the comment lines: each statement ends
// with a semicolon at the end of a line, or spans the lines between
// StatementBegin and StatementEnd. go-sql-driver/mysql runs one statement
// per call unless the DSN sets multiStatements.
func Statements(sqlText string) []string {
	var out []string
	var cur strings.Builder
	whole := false // between StatementBegin and StatementEnd
	for _, line := range strings.Split(sqlText, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == StatementBegin:
			whole = true
			continue
		case t == StatementEnd:
			whole = false
			t = ";"
		case t == "" || strings.HasPrefix(t, "--"):
			continue
		default:
			cur.WriteString(line)
			cur.WriteString("\n")
		}
		if strings.HasSuffix(t, ";") && !whole {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}
