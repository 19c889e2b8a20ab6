module github.com/outboxrelay/outbox/chaos

go 1.26.8

replace (
	github.com/outboxrelay/outbox => ..
	github.com/outboxrelay/outbox/backends/mysql => ../backends/mysql
	github.com/outboxrelay/outbox/backends/postgres => ../backends/postgres
	github.com/outboxrelay/outbox/backends/redis => ../backends/redis
	github.com/outboxrelay/outbox/cmd/outbox => ../cmd/outbox
	github.com/outboxrelay/outbox/internal/cmd/kfakebroker => ../internal/cmd/kfakebroker
	github.com/outboxrelay/outbox/internal/ops => ../internal/ops
	github.com/outboxrelay/outbox/internal/testenv/containers => ../internal/testenv/containers
	github.com/outboxrelay/outbox/move => ../move
	github.com/outboxrelay/outbox/sinks/kafka => ../sinks/kafka
	github.com/outboxrelay/outbox/ui => ../ui
)

require (
	github.com/jackc/pgx/v5 v5.13.0
	github.com/nats-io/nats.go v1.55.0
	github.com/outboxrelay/outbox v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/backends/mysql v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/backends/postgres v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/backends/redis v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/sinks/kafka v0.0.0-00010101000000-000000000000
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stretchr/testify v1.12.1
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
)

require (
	codeberg.org/go-fonts/liberation v0.5.0 // indirect
	codeberg.org/go-latex/latex v0.2.0 // indirect
	codeberg.org/go-pdf/fpdf v0.11.1 // indirect
	filippo.io/edwards25519 v1.2.0 // indirect
	git.sr.ht/~sbinet/gg v0.7.0 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	golang.org/x/image v0.30.0 // indirect
	gonum.org/v1/plot v0.17.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/go-sql-driver/mysql v1.10.1
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
