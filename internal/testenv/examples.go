package testenv

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// SkipExamples leaves a test binary's Example functions out (it adds
// ^Example to -test.skip) and says why on stderr, naming pkg and the
// service the Examples need. Call it from TestMain, before m.Run, when the
// service is unreachable and not required. A -test.skip that names
// subtests is left alone (joined with "|", its subtest elements would
// change meaning), and the Examples then fail.
func SkipExamples(pkg, service, why string) {
	skip := flag.Lookup("test.skip").Value.String()
	switch {
	case skip == "":
		skip = "^Example"
	case strings.Contains(skip, "/"):
		fmt.Fprintf(os.Stderr, "%s: the Examples need %s and cannot be skipped with -test.skip %q (it names subtests): %s\n", pkg, service, skip, why)
		return
	default:
		skip += "|^Example"
	}
	_ = flag.Set("test.skip", skip)
	fmt.Fprintf(os.Stderr, "%s: skipping the Examples, which need %s: %s\n", pkg, service, why)
}
