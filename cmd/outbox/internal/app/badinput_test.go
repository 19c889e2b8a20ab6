package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/clitest"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox/internal/testenv"
)

// TestBadInputRedisAuth: a wrong password, a missing one and one the
// server does not expect each get an error that says which and how to
// fix the URL; the password never shows.
func TestBadInputRedisAuth(t *testing.T) {
	t.Parallel()
	port := privateRedis(t, "port", "requirepass Right-Pass-7q")
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	prefix := "{auth}"
	cliOK(t, "migrate", "up", "--partitions", "1", "--prefix", prefix, "--store", "redis://:Right-Pass-7q@"+addr)
	if got := cliOK(t, "status", "--prefix", prefix, "--store", "redis://:Right-Pass-7q@"+addr); strings.Contains(got, "Right-Pass-7q") || !strings.Contains(got, "redis://:xxxxx@"+addr) {
		t.Fatalf("status names the store without its password:\n%s", got)
	}
	r := cliFails(t, 1, []string{"rejected the user name or password (WRONGPASS)", "redis://USER:PASSWORD@HOST"}, "status", "--store", "redis://:Wrong-Pass-3x@"+addr)
	if strings.Contains(r.stdout+r.stderr, "Wrong-Pass-3x") {
		t.Fatalf("the password shows: %v", r)
	}
	cliFails(t, 1, []string{"requires a password (NOAUTH)", "redis://:PASSWORD@HOST"}, "status", "--store", "redis://"+addr)
}

// TestBadInputRedisNoPerm: a user that may not load scripts is told which
// permission it lacks; a user with the ACL rules the message recommends
// can run every command.
func TestBadInputRedisNoPerm(t *testing.T) {
	t.Parallel()
	prefix := "{perm}"
	port := privateRedis(t, "port",
		"user default on nopass ~* &* +@all",
		"user reader on >Reader-Pass-5 ~* &* +@all -@scripting",
		"user app on >App-Pass-6 "+cli.ACLRules(prefix))
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cliOK(t, "migrate", "up", "--partitions", "2", "--prefix", prefix, "--store", "redis://"+addr)
	cliFails(t, 1, []string{"the Redis user reader may not run what the outbox needs (NOPERM", "ACL SETUSER reader", "+@scripting", "~{perm*"},
		"status", "--prefix", prefix, "--store", "redis://reader:Reader-Pass-5@"+addr)
	if help := cliOK(t, "help", "stores"); !strings.Contains(help, cli.ACLRules("{orders}")) {
		t.Fatalf("'outbox help stores' does not give the ACL rules %q:\n%s", cli.ACLRules("{orders}"), help)
	}
	app := []string{"--prefix", prefix, "--store", "redis://app:App-Pass-6@" + addr}
	cliOK(t, append([]string{"status"}, app...)...)
	cliOK(t, append([]string{"parked"}, app...)...)
	cliOK(t, append([]string{"requeue", "--all", "--yes"}, app...)...)
	cliOK(t, append([]string{"cancel", "x"}, app...)...)
	cliOK(t, append([]string{"migrate", "status"}, app...)...)
}

// TestBadInputRedisCluster: a Cluster node given as a redis:// URL is
// refused with the redis+cluster:// form to use, a MOVED error is
// explained the same way, and the redis+cluster:// form works.
func TestBadInputRedisCluster(t *testing.T) {
	t.Parallel()
	addrs := testenv.RedisClusterAddrs()
	if addrs == nil {
		testenv.Unavailable(t, "Redis Cluster", "OUTBOX_REDIS_CLUSTER_ADDRS",
			errors.New("OUTBOX_REDIS_CLUSTER_ADDRS is unset; start one with scripts/redis-cluster.sh start and set it to 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"))
	}
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cc.Close() })
	if err := cc.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, "Redis Cluster", "OUTBOX_REDIS_CLUSTER_ADDRS", err)
	}
	prefix := cliPrefix(t, cc)
	cliFails(t, 1, []string{"is a Redis Cluster node", "redis+cluster://" + addrs[0]}, "status", "--store", "redis://"+addrs[0], "--prefix", prefix)

	// A MOVED reply, as a server-side check that INFO is denied would
	// leave it to come: explained with the same fix.
	node := redis.NewClient(&redis.Options{Addr: addrs[0]})
	t.Cleanup(func() { _ = node.Close() })
	var moved error
	for i := 0; i < 100 && moved == nil; i++ {
		if err := node.Get(ctx, fmt.Sprint("k", i)).Err(); err != nil && strings.HasPrefix(err.Error(), "MOVED") {
			moved = err
		}
	}
	if moved == nil {
		t.Fatal("no key of the first 100 lives on another node")
	}
	target, err := cli.ParseStore("redis://" + addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	if msg := target.Explain(moved).Error(); !strings.Contains(msg, "is a Redis Cluster node (MOVED") || !strings.Contains(msg, "redis+cluster://"+addrs[0]) {
		t.Fatalf("MOVED explained as: %s", msg)
	}

	store := "redis+cluster://" + strings.Join(addrs, ",")
	cliOK(t, "migrate", "up", "--partitions", "4", "--prefix", prefix, "--store", store)
	if st := statusOf(t, []string{"--prefix", prefix, "--store", store}); st.Partitions != 4 || len(st.ByPartition) != 4 {
		t.Fatalf("status on the cluster: %+v", st)
	}
	cliFails(t, 1, []string{"is not a Cluster node", "for one server write redis://"}, "status", "--store", "redis+cluster://"+strings.TrimPrefix(cliRedisAddr(t), "redis://"))
}

// cliRedisAddr is host:port of the shared Redis.
func cliRedisAddr(t *testing.T) string {
	url, _ := cliRedis(t)
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return o.Addr
}

// TestBadInputTLS: rediss:// against a plain-text server says it does not
// speak TLS; against a TLS server it works with the CA given by tls_ca,
// and without it (or with a wrong server name) says what to set; redis://
// against it suggests rediss://.
func TestBadInputTLS(t *testing.T) {
	t.Parallel()
	cliFails(t, 1, []string{"does not speak TLS", "use redis:// instead of rediss://"}, "status", "--store", "rediss://"+cliRedisAddr(t))

	pki := clitest.NewPKI(t)
	ca, cert, key := pki.CAFile, pki.CertFile, pki.KeyFile
	port := privateRedis(t, "tls-port", "tls-cert-file "+cert, "tls-key-file "+key, "tls-ca-cert-file "+ca, "tls-auth-clients no")
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	prefix := "{tls}"
	cliOK(t, "migrate", "up", "--partitions", "1", "--prefix", prefix, "--store", "rediss://"+addr+"?tls_ca="+ca)
	cliOK(t, "status", "--prefix", prefix, "--store", "rediss://"+addr+"?tls_ca="+ca)
	cliFails(t, 1, []string{"not signed by a trusted CA", "tls_ca=FILE"}, "status", "--prefix", prefix, "--store", "rediss://"+addr)
	cliFails(t, 1, []string{"not valid for the name", "tls_server_name"}, "status", "--prefix", prefix, "--store", "rediss://"+addr+"?tls_ca="+ca+"&tls_server_name=other.example")
	cliOK(t, "status", "--prefix", prefix, "--store", "rediss://"+addr+"?skip_verify=true")
	cliFails(t, 1, []string{"closed the connection", "if it speaks TLS only, use rediss://"}, "status", "--prefix", prefix, "--timeout", "5s", "--store", "redis://"+addr)
	cliFails(t, 2, []string{"tls_ca= sets up TLS, but the URL is plain text"}, "status", "--store", "redis://"+addr+"?tls_ca="+ca)
}

// TestBadInputSentinel: a redis+sentinel:// URL finds the master through
// a Sentinel; an unknown master name is explained.
func TestBadInputSentinel(t *testing.T) {
	t.Parallel()
	master := privateRedis(t, "port", "requirepass Master-Pass-8")
	sentinel := privateSentinel(t, master, "Master-Pass-8")
	store := fmt.Sprintf("redis+sentinel://:Master-Pass-8@127.0.0.1:%d/mymaster", sentinel)
	prefix := "{sentinel}"
	cliOK(t, "migrate", "up", "--partitions", "2", "--prefix", prefix, "--store", store)
	if st := statusOf(t, []string{"--prefix", prefix, "--store", store}); st.Partitions != 2 || strings.Contains(st.Store, "Master-Pass-8") {
		t.Fatalf("status through Sentinel: %+v", st)
	}
	cliFails(t, 1, []string{"do not know the master named in the URL"}, "status", "--timeout", "5s", "--prefix", prefix, "--store",
		fmt.Sprintf("redis+sentinel://:Master-Pass-8@127.0.0.1:%d/othermaster", sentinel))
}

// privateSentinel starts a Sentinel of the test's own that monitors the
// master on masterPort, and returns its port.
func privateSentinel(t *testing.T, masterPort int, masterPass string) int {
	t.Helper()
	return privateRedisMode(t, "--sentinel",
		fmt.Sprintf("sentinel monitor mymaster 127.0.0.1 %d 1", masterPort),
		"sentinel auth-pass mymaster "+masterPass)
}

// TestBadInputPostgres: a wrong password (28P01, from a server that
// speaks the protocol and refuses it, since the test server trusts every
// local connection) and an unknown database are explained.
func TestBadInputPostgres(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go refusePassword(conn)
		}
	}()
	r := cliFails(t, 1, []string{`rejected the password of user "app" (28P01 invalid_password)`, "correct the password"},
		"status", "--store", fmt.Sprintf("postgres://app:Wrong-PG-Pass-2@%s/app?sslmode=disable", l.Addr()))
	if strings.Contains(r.stdout+r.stderr, "Wrong-PG-Pass-2") {
		t.Fatalf("the password shows: %v", r)
	}
	url, _ := cliPostgres(t)
	cfgURL := strings.Replace(url, "/postgres?", "/no_such_db_here?", 1)
	if cfgURL == url {
		t.Skipf("the test server's URL (%s) does not name the postgres database", cli.RedactText(url))
	}
	cliFails(t, 1, []string{"has no such database (3D000", "fix the database name"}, "status", "--store", cfgURL)
	cliFails(t, 1, []string{"nothing listens at 127.0.0.1:1"}, "status", "--store", "postgres://app@127.0.0.1:1/app?sslmode=disable")
	cliFails(t, 2, []string{"the store URL has no scheme"}, "status", "--store", "app:pw@db.internal/app")
	cliFails(t, 2, []string{"--prefix names a Redis outbox"}, "status", "--store", url, "--prefix", "{x}")
}

// refusePassword plays a PostgreSQL server that asks for a password and
// refuses it.
func refusePassword(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	be := pgproto3.NewBackend(conn, conn)
	msg, err := be.ReceiveStartupMessage()
	if _, ok := msg.(*pgproto3.SSLRequest); ok && err == nil {
		if _, err := conn.Write([]byte("N")); err != nil {
			return
		}
		msg, err = be.ReceiveStartupMessage()
	}
	start, ok := msg.(*pgproto3.StartupMessage)
	if err != nil || !ok {
		return
	}
	be.Send(&pgproto3.AuthenticationCleartextPassword{})
	if be.Flush() != nil || be.SetAuthType(pgproto3.AuthTypeCleartextPassword) != nil {
		return
	}
	if _, err := be.Receive(); err != nil {
		return
	}
	be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01",
		Message: fmt.Sprintf("password authentication failed for user %q", start.Parameters["user"])})
	_ = be.Flush()
}
