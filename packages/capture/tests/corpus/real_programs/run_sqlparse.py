"""Driver (ours) for sqlparse: formats and analyses SQL statements that the driver makes from a
seeded generator, one statement at a time (the lexer, the statement splitter and the filter
stack are sqlparse's own generators), printing the reindented SQL and what parse() found."""

import argparse
import random

import sqlparse

parser = argparse.ArgumentParser()
parser.add_argument("--statements", type=int, default=1200)
parser.add_argument("--seed", type=int, default=5)
args = parser.parse_args()

rng = random.Random(args.seed)
TABLES = ["orders", "customers", "items", "payments", "shipments", "regions"]
COLUMNS = ["id", "name", "total", "created_at", "status", "region_id", "price", "qty"]


def expr(depth=0):
    col = f"{rng.choice('abcdef')}.{rng.choice(COLUMNS)}"
    if depth > 2 or rng.random() < 0.4:
        return f"{col} {rng.choice(['=', '<', '>=', '<>'])} {rng.randrange(1000)}"
    op = rng.choice(["and", "or"])
    return f"({expr(depth + 1)} {op} {expr(depth + 1)})"


def statement():
    kind = rng.random()
    if kind < 0.6:
        cols = ", ".join(f"a.{c}" for c in rng.sample(COLUMNS, rng.randint(1, 5)))
        joins = " ".join(
            f"left join {t} {a} on {a}.id = a.{rng.choice(COLUMNS)}"
            for t, a in zip(rng.sample(TABLES, rng.randint(0, 3)), "bcd")
        )
        group = f" group by a.{rng.choice(COLUMNS)}" if rng.random() < 0.3 else ""
        return (f"select {cols}, count(*) as n from {rng.choice(TABLES)} a {joins} "
                f"where {expr()}{group} order by n desc limit {rng.randrange(1, 100)};")
    if kind < 0.8:
        values = ", ".join(repr(rng.choice(["x", "y", "it's"])) for _ in range(3))
        return f"insert into {rng.choice(TABLES)} (name, status, note) values ({values});"
    return f"update {rng.choice(TABLES)} set total = total * 1.1 where {expr()};"


for number in range(args.statements):
    sql = statement()
    parsed = sqlparse.parse(sql)[0]
    print(f"-- {number}: {parsed.get_type()}, {len(list(parsed.flatten()))} tokens")
    print(sqlparse.format(sql, reindent=True, keyword_case="upper", identifier_case="lower"),
          flush=True)
