package outbox_test

import (
	"os"
	"strings"
	"testing"
)

// The root module is what every user of the library requires: it must not
// pull in a store client, a broker client, the CLI's libraries or a test
// container library (each backend, sink and command is a module of its
// own; see go.work).
func TestRootModuleRequiresNoClient(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{
		"github.com/jackc/", "github.com/redis/", "github.com/twmb/franz-go", "github.com/nats-io/",
		"github.com/rabbitmq/", "github.com/go-sql-driver/", "github.com/alecthomas/kong",
		"github.com/testcontainers/", "github.com/chromedp/", "github.com/prometheus/",
	}
	for _, line := range strings.Split(string(b), "\n") {
		for _, f := range forbidden {
			if strings.HasPrefix(strings.TrimSpace(line), f) {
				t.Errorf("the root go.mod requires %q: move the code that needs it into a module of its own", strings.TrimSpace(line))
			}
		}
	}
}
