package mysqloutbox

import "strings"

// FetchQuery is the text of the fetch statement b prepared.
func FetchQuery(b *Backend) string {
	return b.names.render(strings.ReplaceAll(query("find_pending_batch"), "{except}", ""))
}
