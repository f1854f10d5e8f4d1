-- messages_part: the staged messages measured as stored (the select slot holds sql/select_messages_part.sql), joined by the tool_results part
CREATE OR REPLACE TEMP VIEW messages_part AS
{select}
