package mysqloutbox

import "strings"

// FetchQuery is the text of the fetch statement b prepared: FetchNext's
// when next is set.
func FetchQuery(b *Backend, next bool) string {
	except := ""
	if next {
		except = exceptSQL
	}
	return b.names.render(strings.ReplaceAll(relayQuery("find_pending_batch"), "{except}", except))
}
