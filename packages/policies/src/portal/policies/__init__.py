"""Portal's placement policies (the state-size bound, spot, cheaper, return, move-when-over).

The policies arrive with their issue; until then this distribution registers no plugin.
"""
