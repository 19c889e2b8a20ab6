-- Import, second statement: ? how many seqs the call takes.
UPDATE {import} SET next_seq = next_seq + ? WHERE one = 1
