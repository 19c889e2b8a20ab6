package outbox

import (
	"runtime/debug"
	"testing"
)

// TestBuildVersion: the default RelayOptions.Version is the main module's
// version, or for a "(devel)" build the VCS revision the build recorded.
func TestBuildVersion(t *testing.T) {
	t.Parallel()
	info := func(version string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "example.com/svc", Version: version}}
		for i := 0; i < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	for _, c := range []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"no build information", nil, false, ""},
		{"a released module", info("v1.4.2", "vcs.revision", "0123456789abcdef0123"), true, "v1.4.2"},
		{"a devel build with its revision", info("(devel)", "vcs.revision", "0123456789abcdef0123", "vcs.modified", "false"), true, "(devel) 0123456789ab"},
		{"a devel build of a modified tree", info("(devel)", "vcs.revision", "0123456789abcdef0123", "vcs.modified", "true"), true, "(devel) 0123456789ab+dirty"},
		{"a devel build without VCS information", info("(devel)"), true, "(devel)"},
		{"a test binary (no version) with a short revision", info("", "vcs.revision", "abc"), true, "(devel) abc"},
		{"nothing at all", info(""), true, ""},
	} {
		if got := buildVersion(c.info, c.ok); got != c.want {
			t.Errorf("%s: buildVersion = %q, want %q", c.name, got, c.want)
		}
	}
	if got, want := (RelayOptions{}).withDefaults().Version, buildVersion(debug.ReadBuildInfo()); got != want {
		t.Errorf("the default Version = %q, want %q from this binary's build information", got, want)
	}
	if got := (RelayOptions{Version: "v9"}).withDefaults().Version; got != "v9" {
		t.Errorf("an explicit Version became %q", got)
	}
}
