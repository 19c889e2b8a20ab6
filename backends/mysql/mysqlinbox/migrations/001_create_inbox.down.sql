-- mysqlinbox migration 001, down: drops every table of the inbox, with
-- its records and stored offsets.
DROP TABLE IF EXISTS `inbox_offsets`;
DROP TABLE IF EXISTS `inbox_keyseq`;
DROP TABLE IF EXISTS `inbox`;
