package testenv

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"
)

// probeTimeout bounds the check that a local default server answers.
const probeTimeout = 3 * time.Second

// A service is PostgreSQL or Redis as the tests find it: where from is
// decided on the first call to url and kept for the test binary.
type service struct {
	name     string // "PostgreSQL"
	variable string // "OUTBOX_POSTGRES_URL"
	fallback string // the local default URL
	// ping reports whether a server answers at url.
	ping func(ctx context.Context, url string) error
	// start starts a container and returns its URL; it returns
	// errNoDocker (wrapped) when no Docker engine is reachable.
	start func() (string, error)
	// containerless: start always fails; no container is ever tried.
	containerless bool

	mu       sync.Mutex
	decided  bool
	resolved string
	from     origin
	// noContainer says why no container runs when from is originNone.
	noContainer error
}

// origin is where a service's URL came from.
type origin int

const (
	originVariable  origin = iota + 1 // the variable was set
	originDefault                     // the local default answered
	originContainer                   // a container started for this binary
	originNone                        // nothing answered and no container started
)

var (
	postgresService = &service{
		name:     "PostgreSQL",
		variable: "OUTBOX_POSTGRES_URL",
		fallback: DefaultPostgresURL,
		ping:     pingPostgres,
		start:    func() (string, error) { return startContainer("postgres") },
	}
	redisService = &service{
		name:     "Redis",
		variable: "OUTBOX_REDIS_URL",
		fallback: DefaultRedisURL,
		ping:     pingRedis,
		start:    func() (string, error) { return startContainer("redis") },
	}
	// The brokers have no container fallback: start returns errNoContainer.
	natsService = &service{
		name:          "NATS",
		variable:      "OUTBOX_NATS_URL",
		fallback:      DefaultNATSURL,
		ping:          pingNATS,
		start:         noContainer,
		containerless: true,
	}
	mysqlService = &service{
		name:          "MySQL",
		variable:      "OUTBOX_MYSQL_URL",
		fallback:      DefaultMySQLURL,
		ping:          pingMySQL,
		start:         noContainer,
		containerless: true,
	}
	amqpService = &service{
		name:          "RabbitMQ",
		variable:      "OUTBOX_AMQP_URL",
		fallback:      DefaultAMQPURL,
		ping:          pingAMQP,
		start:         noContainer,
		containerless: true,
	}
)

// errNoContainer is what a service without a container fallback reports.
var errNoContainer = errors.New("the tests start no container for it")

func noContainer() (string, error) { return "", errNoContainer }

// serviceFor returns the service configured by variable, or nil.
func serviceFor(variable string) *service {
	for _, s := range []*service{postgresService, redisService, natsService, amqpService, mysqlService} {
		if s.variable == variable {
			return s
		}
	}
	return nil
}

// url decides, on the first call, where the service is (see the package
// doc), and returns that URL. Concurrent callers wait for the decision.
func (s *service) url() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.decided {
		s.resolved, s.from, s.noContainer = s.decide()
		s.decided = true
	}
	return s.resolved
}

func (s *service) decide() (string, origin, error) {
	if v := os.Getenv(s.variable); v != "" {
		return v, originVariable, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	err := s.ping(ctx, s.fallback)
	cancel()
	if err == nil {
		return s.fallback, originDefault, nil
	}
	u, err := s.start()
	if err != nil {
		return s.fallback, originNone, err
	}
	return u, originContainer, nil
}

// remedy tells how to get the service, and what became of the container.
func (s *service) remedy() string {
	msg := "set " + s.variable + ", start local services with ./scripts/services.sh start, " +
		"or run a Docker engine so that the tests start a " + s.name + " container"
	if s.containerless {
		return "set " + s.variable + ", or install and start one with ./scripts/services.sh install (root, Debian) or ./scripts/services.sh start"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.decided {
		return msg
	}
	switch s.from {
	case originVariable:
		msg += " (" + s.variable + " is set, so neither the local default nor a container was tried)"
	case originContainer:
		msg += " (the tests' container did not answer)"
	case originNone:
		if errors.Is(s.noContainer, errNoDocker) {
			msg += " (" + oneLine(s.noContainer) + ")"
		} else {
			msg += " (a Docker engine is reachable but the container did not start: " + oneLine(s.noContainer) + ")"
		}
	}
	return msg
}
