package redisoutbox

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox/internal/testenv"
)

func TestMain(m *testing.M) {
	flag.Parse()
	examplesNeedRedis()
	os.Exit(m.Run())
}

// examplesNeedRedis makes the Examples (example_test.go) runnable or leaves
// them out. They run against a real Redis (a single node) and compare what
// they print with their Output comments, and an Example cannot skip
// itself. So TestMain checks once that the server answers: when it does,
// the Examples read its URL from OUTBOX_REDIS_URL (set here when the
// variable was unset and testenv found the server elsewhere); when it does
// not and OUTBOX_REQUIRE_SERVICES is not 1, every Example is left out
// through -test.skip, and this says so on stderr (go test shows no SKIP
// line for an Example). With OUTBOX_REQUIRE_SERVICES=1 they run anyway and
// fail, as the tests do.
func examplesNeedRedis() {
	url := testenv.RedisURL()
	err := pingRedis(url)
	if err == nil {
		_ = os.Setenv("OUTBOX_REDIS_URL", url)
		return
	}
	if testenv.Required() {
		return
	}
	testenv.SkipExamples("redisoutbox", "Redis", "no server answers ("+err.Error()+"); set OUTBOX_REDIS_URL or run ./scripts/services.sh start")
}

func pingRedis(url string) error {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	opt.MaxRetries = -1 // one try: this is a probe
	opt.DialerRetries = 1
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}
