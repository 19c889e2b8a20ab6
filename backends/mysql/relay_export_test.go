package mysqloutbox

import "strings"

// FetchQuery is the text of the fetch statement b prepared: FetchNext's
// when next is set.
func FetchQuery(b *Backend, next bool) string {
	except := ""
	if next {
		except = exceptSQL
	}
	return b.renderRelay(strings.ReplaceAll(relayQuery("find_pending_batch"), "{except}", except))
}

// RelayQuery is the text of queries/name.sql as b renders it.
func RelayQuery(b *Backend, name string) string {
	return b.renderRelay(strings.ReplaceAll(relayQuery(name), "{max_history}", "10"))
}
