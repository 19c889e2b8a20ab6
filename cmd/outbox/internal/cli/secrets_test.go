package cli

import (
	"testing"
)

// TestRedactText: passwords leave URL-looking text whatever the form.
func TestRedactText(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"dial postgres://app:s3cr%2Fet@db:5432/app failed", "dial postgres://app:xxxxx@db:5432/app failed"},
		{"redis://:pw@h:6379/0", "redis://:xxxxx@h:6379/0"},
		{"rediss://lonepw@h/0", "rediss://xxxxx@h/0"},
		{"postgres://app@db/app", "postgres://app@db/app"},
		{"host=db user=app password=secret dbname=x", "host=db user=app password=xxxxx dbname=x"},
		{"host=db password='a b c' x", "host=db password=xxxxx x"},
		{"redis+sentinel://h/m?sentinel_password=pw&db=1", "redis+sentinel://h/m?sentinel_password=xxxxx&db=1"},
		{"u:p@ss@h", "u:p@ss@h"}, // no scheme: only exact secrets are removed
		{"a redis://USER:PASSWORD@HOST form", "a redis://USER:PASSWORD@HOST form"},
		{"two redis://:a1@h and postgres://u:b2@h", "two redis://:xxxxx@h and postgres://u:xxxxx@h"},
		{"nats://Tok3n-abc@n1:4222,nats://Tok3n-abc@n2:4222", "nats://xxxxx@n1:4222,nats://xxxxx@n2:4222"},
		{"tls://relay:Pa55@n1:4222", "tls://relay:xxxxx@n1:4222"},
		{"amqps://relay:Pa55@mq:5671/billing", "amqps://relay:xxxxx@mq:5671/billing"},
		{"amqp://relay@mq/billing", "amqp://relay@mq/billing"}, // an AMQP user alone is no secret
		{"mysql://app:Pa55@db:3306/orders", "mysql://app:xxxxx@db:3306/orders"},
		{"mariadb://app:p%40ss@db/orders", "mariadb://app:xxxxx@db/orders"},
		{"mysql://app@db/orders", "mysql://app@db/orders"}, // a MySQL user alone is no secret
		{"dsn app:Pa55@tcp(db:3306)/orders?timeout=5s", "dsn app:xxxxx@tcp(db:3306)/orders?timeout=5s"},
		{"open \"app:p@ss@tcp(127.0.0.1:3306)/x\"", "open \"app:xxxxx@tcp(127.0.0.1:3306)/x\""},
		{"root:@unix(/run/mysqld.sock)/x", "root:xxxxx@unix(/run/mysqld.sock)/x"},
	}
	for _, tc := range tests {
		if got := RedactText(tc.in); got != tc.want {
			t.Errorf("redactText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := RedactText("echo Sup3rSecret alone", "Sup3rSecret"); got != "echo xxxxx alone" {
		t.Errorf("exact redaction: %q", got)
	}
	if got := URLSecrets("redis://:a%2Fb-long@h/0"); len(got) != 2 || got[0] != "a%2Fb-long" || got[1] != "a/b-long" {
		t.Errorf("urlSecrets: %q", got)
	}
	if got := URLSecrets("app:Dsn-Secret@tcp(h:3306)/db"); len(got) != 1 || got[0] != "Dsn-Secret" {
		t.Errorf("URLSecrets of a MySQL DSN: %q", got)
	}
	if got := URLSecrets("nats://s3cret-tok@h:4222"); len(got) != 1 || got[0] != "s3cret-tok" {
		t.Errorf("URLSecrets of a NATS token URL: %q", got)
	}
}
