-- mysqlinbox migration 002, down: drops the procedure (the Store then
-- sends its two statements).
DROP PROCEDURE IF EXISTS `inbox_finish`;
