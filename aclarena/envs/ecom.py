"""E-commerce: a customer-service agent with a dozen tools, policy rules and a scripted user (τ-bench role).

In-domain (retail, the study's τ³-Retail): each task has its own small database of users,
orders and products, 12 tools (find the user, read orders and products, cancel, return,
exchange, change address or payment, hand over to a human) and a policy:

* confirm every change with the user (a question answered ``yes``) before calling a tool
  that changes the database;
* act only on the requesting user's own orders;
* cancel or modify (address, payment) only *pending* orders; return or exchange only
  *delivered* ones; exchange only for an in-stock product of the same kind;
* refuse anything else.

Out-of-domain (telecom, the study's τ³-Telecom): a phone company's database (customers,
lines, plans, bills) behind a different set of 12 tools, with its own rules (resume a
line only when the bill is paid, at most 5 GB of extra data per request, ...).

The scripted user opens with a request, answers ``yes`` or ``no`` (as the task says) to
every assistant message that asks a question, and leaves when the assistant replies
without a question. Reward (after τ-bench's): 1 when the final database equals the expected
one, no policy was broken, no tool step failed, and the agent looked up what the decision
rests on (the user and the order; the customer and the line or bill) and, for a request
it may grant, asked the user; else 0. (Without the last two conditions an agent that does
nothing would be rewarded on every refusal and every declined request.)
"""

from __future__ import annotations

import copy
import random
from typing import Any

from aclarena.envs.base import (
    Environment,
    Task,
    ToolError,
    Trajectory,
    check_args,
    compact_json,
    render_tool_call,
    stable_hash,
    tool_schema,
)

FIRST = ["Ana", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana", "Ian", "Jo", "Kim", "Lou", "Mae", "Ned", "Oli",
         "Pia"]
LAST = ["Lee", "Diaz", "Park", "Moss", "Reed", "Shaw", "Cole", "Webb", "Hart", "Ford"]
STREETS = ["Oak", "Pine", "Elm", "Lake", "Hill", "Park", "Mill", "Rose"]
PAYMENTS = ["card", "paypal", "gift card"]
CATALOG = [
    ("p1", "red mug", "mug", 8), ("p2", "blue mug", "mug", 8), ("p3", "green mug", "mug", 9),
    ("p4", "desk lamp", "lamp", 25), ("p5", "floor lamp", "lamp", 40), ("p6", "small tent", "tent", 60),
    ("p7", "large tent", "tent", 90), ("p8", "black shirt", "shirt", 15), ("p9", "white shirt", "shirt", 15),
    ("p10", "grey shirt", "shirt", 16), ("p11", "wool hat", "hat", 12), ("p12", "sun hat", "hat", 10),
]
GREETINGS = ["Hi, I'm {name}.", "Hello, this is {name}.", "Hi, my name is {name}."]

RETAIL_SYSTEM = (
    "You are ShopCo's customer service agent. Policy: find the user first; act only on their own orders; ask "
    "the user to confirm (yes/no) before any change; cancel or modify only pending orders; return or exchange "
    "only delivered orders, for an in-stock product of the same kind; refuse anything else."
)
TELECOM_SYSTEM = (
    "You are TelNet's mobile phone support agent. Policy: find the customer by phone number first; ask the "
    "customer to confirm (yes/no) before any change; change plans and add data (at most 5 GB) only on active "
    "lines; resume a suspended line only if the bill is paid; refuse anything else."
)

RETAIL_TOOLS = [
    tool_schema("find_user", "Find a user id by full name.", {"name": ("string", "full name")}),
    tool_schema("get_user", "User details.", {"user_id": ("string", "user id")}),
    tool_schema("list_orders", "A user's orders.", {"user_id": ("string", "user id")}),
    tool_schema("get_order", "Order details.", {"order_id": ("string", "order id")}),
    tool_schema("get_product", "Product details.", {"product_id": ("string", "product id")}),
    tool_schema("search_products", "Find products by name.", {"query": ("string", "product name")}),
    tool_schema("cancel_order", "Cancel a pending order.", {"order_id": ("string", "order id")}),
    tool_schema("return_order", "Return a delivered order.", {"order_id": ("string", "order id")}),
    tool_schema("exchange_item", "Exchange an item of a delivered order.",
                {"order_id": ("string", "order id"), "item_id": ("string", "product id of the item"),
                 "new_item_id": ("string", "product id of the new item")}),
    tool_schema("change_address", "Change the address of a pending order.",
                {"order_id": ("string", "order id"), "address": ("string", "new address")}),
    tool_schema("change_payment", "Change the payment of a pending order.",
                {"order_id": ("string", "order id"), "method": ("string", "card, paypal or gift card")}),
    tool_schema("transfer_to_human", "Hand the case to a human agent.", {"summary": ("string", "the case")}),
]
TELECOM_TOOLS = [
    tool_schema("find_customer", "Find a customer id by phone number.", {"phone": ("string", "phone number")}),
    tool_schema("get_customer", "Customer details.", {"customer_id": ("string", "customer id")}),
    tool_schema("get_line", "Line details.", {"phone": ("string", "phone number")}),
    tool_schema("list_plans", "All plans.", {}),
    tool_schema("get_plan", "Plan details.", {"plan_id": ("string", "plan id")}),
    tool_schema("change_plan", "Move an active line to another plan.",
                {"phone": ("string", "phone number"), "plan_id": ("string", "plan id")}),
    tool_schema("suspend_line", "Suspend an active line.", {"phone": ("string", "phone number")}),
    tool_schema("resume_line", "Resume a suspended line.", {"phone": ("string", "phone number")}),
    tool_schema("add_data", "Add data to an active line.",
                {"phone": ("string", "phone number"), "gb": ("integer", "gigabytes, 1-5")}),
    tool_schema("get_bill", "A customer's bill.", {"customer_id": ("string", "customer id")}),
    tool_schema("pay_bill", "Pay a customer's bill.", {"customer_id": ("string", "customer id")}),
    tool_schema("transfer_to_human", "Hand the case to a human agent.", {"summary": ("string", "the case")}),
]
PLANS = {"basic": ("Basic", 5, 20), "plus": ("Plus", 15, 35), "max": ("Max", 40, 50), "travel": ("Travel", 10, 45)}

RETAIL_WRITES = {"cancel_order", "return_order", "exchange_item", "change_address", "change_payment"}
TELECOM_WRITES = {"change_plan", "suspend_line", "resume_line", "add_data", "pay_bill"}


def _call(tool: str, **arguments: Any) -> str:
    return render_tool_call(tool, arguments)


# --- retail ------------------------------------------------------------------------------------


def _retail_db(rng: random.Random) -> dict[str, Any]:
    names = rng.sample([f"{f} {x}" for f in FIRST for x in LAST], 3)
    uids = rng.sample(range(10, 100), 3)
    users = {f"u{u}": {"name": n, "address": f"{rng.randint(1, 99)} {rng.choice(STREETS)} St"}
             for u, n in zip(uids, names, strict=True)}
    products = {pid: {"name": name, "category": cat, "price": price, "in_stock": rng.random() < 0.8}
                for pid, name, cat, price in CATALOG}
    orders: dict[str, Any] = {}
    oids = rng.sample(range(100, 1000), 5)
    user_ids = list(users)
    for i, oid in enumerate(oids):
        uid = user_ids[i] if i < len(user_ids) else rng.choice(user_ids)
        orders[f"W{oid}"] = {
            "user_id": uid,
            "status": rng.choice(["pending", "delivered"]),
            "items": sorted(rng.sample([p[0] for p in CATALOG], rng.randint(1, 2)), key=lambda p: int(p[1:])),
            "address": users[uid]["address"],
            "payment": rng.choice(PAYMENTS),
        }
    return {"users": users, "orders": orders, "products": products}


RETAIL_NEEDS = {"cancel": "pending", "address": "pending", "payment": "pending", "return": "delivered",
                "exchange": "delivered"}
RETAIL_VERB = {"cancel": "cancelled", "address": "changed", "payment": "changed", "return": "returned",
               "exchange": "exchanged"}


def _can_exchange(db: dict[str, Any], order: dict[str, Any]) -> bool:
    cat = db["products"]
    return any(cat[p]["category"] == cat[i]["category"] and p not in order["items"]
               for i in order["items"] for p in cat)


def _retail_request(rng: random.Random, db: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    kind = rng.choice(sorted(RETAIL_NEEDS))
    uid = rng.choice(sorted(db["users"]))
    name = db["users"][uid]["name"]
    own = sorted(o for o, v in db["orders"].items() if v["user_id"] == uid)
    others = sorted(o for o, v in db["orders"].items() if v["user_id"] != uid)
    scenario = rng.choices(["allowed", "status", "other_user", "product"], weights=[70, 15, 8, 7])[0]
    oid = rng.choice(others if scenario == "other_user" else own)
    order = db["orders"][oid]
    if kind == "exchange" and not _can_exchange(db, order):
        kind = "return"  # nothing of the same kind left to exchange for: ask for a return instead
    if kind != "exchange" and scenario == "product":
        scenario = "status"
    need = RETAIL_NEEDS[kind]
    order["status"] = need if scenario != "status" else ("delivered" if need == "pending" else "pending")
    req: dict[str, Any] = {"kind": kind, "order_id": oid, "user_id": uid}
    greeting = rng.choice(GREETINGS).format(name=name)
    if kind == "cancel":
        text = f"Please cancel my order {oid}."
    elif kind == "return":
        text = f"I want to return my order {oid}."
    elif kind == "address":
        new = f"{rng.randint(1, 99)} {rng.choice(STREETS)} St"
        while new == order["address"]:
            new = f"{rng.randint(1, 99)} {rng.choice(STREETS)} St"
        req["address"] = new
        text = f"Please change the address of my order {oid} to {new}."
    elif kind == "payment":
        method = rng.choice([p for p in PAYMENTS if p != order["payment"]])
        req["method"] = method
        text = f"Please change the payment of my order {oid} to {method}."
    else:
        swaps = {i: [p for p in sorted(db["products"], key=lambda p: int(p[1:]))
                     if db["products"][p]["category"] == db["products"][i]["category"] and p not in order["items"]]
                 for i in order["items"]}
        item = rng.choice([i for i in order["items"] if swaps[i]])
        cat = db["products"][item]["category"]
        same = swaps[item]
        if scenario == "product" and rng.random() < 0.5:
            new_item = rng.choice([p for p in db["products"] if db["products"][p]["category"] != cat])
            req["problem"] = "category"
        else:
            new_item = rng.choice(same)
            db["products"][new_item]["in_stock"] = scenario != "product"
            if scenario == "product":
                req["problem"] = "stock"
        req["item_id"], req["new_item_id"] = item, new_item
        text = (f"In my order {oid}, please exchange the {db['products'][item]['name']} for a "
                f"{db['products'][new_item]['name']}.")
    req["allowed"] = scenario == "allowed"
    req["confirm"] = rng.random() < 0.8 if req["allowed"] else True
    return f"{greeting} {text}", req


def _retail_apply(db: dict[str, Any], kind: str, args: dict[str, Any]) -> None:
    order = db["orders"][args["order_id"]]
    if kind == "cancel_order":
        order["status"] = "cancelled"
    elif kind == "return_order":
        order["status"] = "returned"
    elif kind == "change_address":
        order["address"] = args["address"]
    elif kind == "change_payment":
        order["payment"] = args["method"]
    elif kind == "exchange_item":
        order["items"] = sorted([p for p in order["items"] if p != args["item_id"]] + [args["new_item_id"]],
                                key=lambda p: int(p[1:]) if p[1:].isdigit() else 0)


RETAIL_TOOL_OF = {"cancel": "cancel_order", "return": "return_order", "exchange": "exchange_item",
                  "address": "change_address", "payment": "change_payment"}


def _retail_write_args(req: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = {"order_id": req["order_id"]}
    if req["kind"] == "exchange":
        args |= {"item_id": req["item_id"], "new_item_id": req["new_item_id"]}
    elif req["kind"] == "address":
        args["address"] = req["address"]
    elif req["kind"] == "payment":
        args["method"] = req["method"]
    return args


def _retail_violations(db: dict[str, Any], req: dict[str, Any], tool: str, args: dict[str, Any]) -> list[str]:
    out: list[str] = []
    order = db["orders"].get(args.get("order_id", ""))
    if order is None:
        return out
    if order["user_id"] != req["user_id"]:
        out.append(f"{tool} on {args['order_id']}, an order of another user")
    need = "pending" if tool in ("cancel_order", "change_address", "change_payment") else "delivered"
    if order["status"] != need:
        out.append(f"{tool} on a {order['status']} order")
    if tool == "exchange_item":
        new = db["products"].get(args["new_item_id"])
        old = db["products"].get(args["item_id"])
        if args["item_id"] not in order["items"]:
            out.append(f"exchange of {args['item_id']}, not in the order")
        if new is None or old is None or new["category"] != old["category"] or not new["in_stock"]:
            out.append(f"exchange for {args['new_item_id']}, not an in-stock product of the same kind")
    if tool == "change_payment" and args.get("method") not in PAYMENTS:
        out.append(f"unknown payment method {args.get('method')!r}")
    return out


def _retail_tool(db: dict[str, Any], req: dict[str, Any], state: dict[str, Any], name: str,
                 args: dict[str, Any]) -> Any:
    users, orders, products = db["users"], db["orders"], db["products"]
    if name == "find_user":
        hits = [u for u, v in users.items() if v["name"].lower() == args["name"].strip().lower()]
        return {"user_id": hits[0]} if hits else {"error": f"no user named {args['name']}"}
    if name in ("get_user", "list_orders"):
        if args["user_id"] not in users:
            return {"error": f"no user {args['user_id']}"}
        own = [o for o, v in orders.items() if v["user_id"] == args["user_id"]]
        if name == "list_orders":
            return [{"order_id": o, "status": orders[o]["status"]} for o in own]
        return {"user_id": args["user_id"], **users[args["user_id"]], "orders": own}
    if name == "get_product":
        p = products.get(args["product_id"])
        return {"product_id": args["product_id"], **p} if p else {"error": f"no product {args['product_id']}"}
    if name == "search_products":
        words = args["query"].lower().split()
        return [{"product_id": p, "name": v["name"], "in_stock": v["in_stock"]} for p, v in products.items()
                if words and all(w in v["name"] or w == v["category"] for w in words)]
    if name == "transfer_to_human":
        state["transferred"] = True
        return {"status": "a human agent will follow up"}
    if "order_id" in args and args["order_id"] not in orders:
        return {"error": f"no order {args['order_id']}"}
    if name == "get_order":
        o = orders[args["order_id"]]
        return {"order_id": args["order_id"], "user_id": o["user_id"], "status": o["status"],
                "items": [{"product_id": p, "name": products[p]["name"]} for p in o["items"]],
                "address": o["address"], "payment": o["payment"]}
    # a write
    if name == "exchange_item" and args["new_item_id"] not in products:
        return {"error": f"no product {args['new_item_id']}"}
    _record_write(state, name, _retail_violations(db, req, name, args))
    _retail_apply(db, name, args)
    o = orders[args["order_id"]]
    changed = {"exchange_item": "items", "change_address": "address", "change_payment": "payment"}.get(name, "status")
    return {"order_id": args["order_id"], changed: o[changed]}


def _retail_expert(task: Task) -> list[str]:
    db, req = task.data["db"], task.data["request"]
    oid = req["order_id"]
    order = db["orders"][oid]
    name = db["users"][req["user_id"]]["name"]
    acts = [_call("find_user", name=name), _call("get_order", order_id=oid)]
    if order["user_id"] != req["user_id"]:
        return [*acts, f"Sorry, order {oid} is not one of your orders, so I cannot change it."]
    need = RETAIL_NEEDS[req["kind"]]
    if order["status"] != need:
        return [*acts, f"Sorry, order {oid} is {order['status']}, so it cannot be {RETAIL_VERB[req['kind']]}."]
    if req["kind"] == "exchange":
        old, new = db["products"][req["item_id"]], db["products"][req["new_item_id"]]
        acts.append(_call("search_products", query=new["name"]))
        if new["category"] != old["category"]:
            return [*acts, f"Sorry, the {old['name']} can only be exchanged for another {old['category']}."]
        if not new["in_stock"]:
            return [*acts, f"Sorry, the {new['name']} is out of stock."]
        question = f"Shall I exchange the {old['name']} for the {new['name']} in order {oid} (yes/no)?"
    elif req["kind"] == "address":
        question = f"Order {oid} is pending. Shall I change its address to {req['address']} (yes/no)?"
    elif req["kind"] == "payment":
        question = f"Order {oid} is pending. Shall I change its payment to {req['method']} (yes/no)?"
    elif req["kind"] == "cancel":
        question = f"Order {oid} is pending. Shall I cancel it (yes/no)?"
    else:
        question = f"Order {oid} is delivered. Shall I return it (yes/no)?"
    acts.append(question)
    if not req["confirm"]:
        return [*acts, "OK, I made no changes."]
    tool = RETAIL_TOOL_OF[req["kind"]]
    return [*acts, _call(tool, **_retail_write_args(req)), f"Done: order {oid} is {RETAIL_VERB[req['kind']]}."]


# --- telecom ------------------------------------------------------------------------------------

TELECOM_NEEDS = {"plan": "active", "suspend": "active", "resume": "suspended", "data": "active", "pay": None}


def _telecom_db(rng: random.Random) -> dict[str, Any]:
    names = rng.sample([f"{f} {x}" for f in FIRST for x in LAST], 3)
    cids = rng.sample(range(10, 100), 3)
    phones = rng.sample(range(100, 1000), 3)
    customers, lines, bills = {}, {}, {}
    for cid, name, ph in zip(cids, names, phones, strict=True):
        phone = f"555-0{ph}"
        customers[f"c{cid}"] = {"name": name, "phone": phone}
        lines[phone] = {"customer_id": f"c{cid}", "plan_id": rng.choice(sorted(PLANS)),
                        "status": rng.choice(["active", "suspended"]), "data_gb": rng.randint(0, 9)}
        bills[f"c{cid}"] = {"amount": rng.choice([20, 35, 45, 50]), "paid": rng.random() < 0.5}
    plans = {k: {"name": v[0], "data_gb": v[1], "price": v[2]} for k, v in PLANS.items()}
    return {"customers": customers, "lines": lines, "bills": bills, "plans": plans}


def _telecom_request(rng: random.Random, db: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    kind = rng.choice(sorted(TELECOM_NEEDS))
    cid = rng.choice(sorted(db["customers"]))
    phone = db["customers"][cid]["phone"]
    line, bill = db["lines"][phone], db["bills"][cid]
    allowed = rng.random() < 0.7
    req: dict[str, Any] = {"kind": kind, "phone": phone, "customer_id": cid}
    greeting = rng.choice(GREETINGS).format(name=db["customers"][cid]["name"]) + f" My number is {phone}."
    if kind == "plan":
        plan = rng.choice([p for p in sorted(PLANS) if p != line["plan_id"]])
        line["status"] = "active" if allowed else "suspended"
        req["plan_id"] = plan
        text = f"Please switch my line to the {PLANS[plan][0]} plan."
    elif kind == "suspend":
        line["status"] = "active" if allowed else "suspended"
        text = "Please suspend my line."
    elif kind == "resume":
        line["status"] = "suspended"
        bill["paid"] = allowed
        text = "Please resume my line."
    elif kind == "data":
        line["status"] = "active"
        req["gb"] = rng.randint(1, 5) if allowed else rng.randint(6, 9)
        text = f"Please add {req['gb']} GB of data to my line."
    else:
        bill["paid"] = not allowed
        text = "Please pay my bill."
    req["allowed"] = allowed
    req["confirm"] = rng.random() < 0.8 if allowed else True
    return f"{greeting} {text}", req


TELECOM_TOOL_OF = {"plan": "change_plan", "suspend": "suspend_line", "resume": "resume_line", "data": "add_data",
                   "pay": "pay_bill"}


def _telecom_write_args(req: dict[str, Any]) -> dict[str, Any]:
    if req["kind"] == "pay":
        return {"customer_id": req["customer_id"]}
    args: dict[str, Any] = {"phone": req["phone"]}
    if req["kind"] == "plan":
        args["plan_id"] = req["plan_id"]
    if req["kind"] == "data":
        args["gb"] = req["gb"]
    return args


def _telecom_violations(db: dict[str, Any], tool: str, args: dict[str, Any]) -> list[str]:
    out = []
    if tool == "pay_bill":
        if db["bills"][args["customer_id"]]["paid"]:
            out.append("pay_bill on a paid bill")
        return out
    line = db["lines"][args["phone"]]
    need = "suspended" if tool == "resume_line" else "active"
    if line["status"] != need:
        out.append(f"{tool} on a {line['status']} line")
    if tool == "resume_line" and not db["bills"][line["customer_id"]]["paid"]:
        out.append("resume_line with an unpaid bill")
    if tool == "add_data" and not 1 <= args["gb"] <= 5:
        out.append(f"add_data of {args['gb']} GB (1-5 allowed)")
    if tool == "change_plan" and (args["plan_id"] not in db["plans"] or args["plan_id"] == line["plan_id"]):
        out.append(f"change_plan to {args['plan_id']!r}")
    return out


def _telecom_apply(db: dict[str, Any], tool: str, args: dict[str, Any]) -> None:
    if tool == "pay_bill":
        db["bills"][args["customer_id"]]["paid"] = True
        return
    line = db["lines"][args["phone"]]
    if tool == "change_plan":
        line["plan_id"] = args["plan_id"]
    elif tool == "suspend_line":
        line["status"] = "suspended"
    elif tool == "resume_line":
        line["status"] = "active"
    elif tool == "add_data":
        line["data_gb"] += args["gb"]


def _telecom_tool(db: dict[str, Any], req: dict[str, Any], state: dict[str, Any], name: str,
                  args: dict[str, Any]) -> Any:
    if name == "find_customer":
        hits = [c for c, v in db["customers"].items() if v["phone"] == args["phone"].strip()]
        return {"customer_id": hits[0]} if hits else {"error": f"no customer with phone {args['phone']}"}
    if name == "get_customer":
        c = db["customers"].get(args["customer_id"])
        return {"customer_id": args["customer_id"], **c} if c else {"error": f"no customer {args['customer_id']}"}
    if name == "list_plans":
        return [{"plan_id": k, **v} for k, v in db["plans"].items()]
    if name == "get_plan":
        p = db["plans"].get(args["plan_id"])
        return {"plan_id": args["plan_id"], **p} if p else {"error": f"no plan {args['plan_id']}"}
    if name == "transfer_to_human":
        state["transferred"] = True
        return {"status": "a human agent will follow up"}
    if "phone" in args and args["phone"] not in db["lines"]:
        return {"error": f"no line {args['phone']}"}
    if "customer_id" in args and args["customer_id"] not in db["bills"]:
        return {"error": f"no customer {args['customer_id']}"}
    if name == "get_line":
        return {"phone": args["phone"], **db["lines"][args["phone"]]}
    if name == "get_bill":
        return {"customer_id": args["customer_id"], **db["bills"][args["customer_id"]]}
    if name == "change_plan" and args["plan_id"] not in db["plans"]:
        return {"error": f"no plan {args['plan_id']}"}
    _record_write(state, name, _telecom_violations(db, name, args))
    _telecom_apply(db, name, args)
    if name == "pay_bill":
        return {"customer_id": args["customer_id"], "paid": True}
    changed = {"change_plan": "plan_id", "add_data": "data_gb"}.get(name, "status")
    return {"phone": args["phone"], changed: db["lines"][args["phone"]][changed]}


def _telecom_expert(task: Task) -> list[str]:
    db, req = task.data["db"], task.data["request"]
    phone, cid = req["phone"], req["customer_id"]
    line, bill = db["lines"][phone], db["bills"][cid]
    kind = req["kind"]
    acts = [_call("find_customer", phone=phone)]
    if kind == "pay":
        acts.append(_call("get_bill", customer_id=cid))
        if bill["paid"]:
            return [*acts, "Your bill is already paid, so there is nothing to pay."]
        question = f"Your bill is {bill['amount']} dollars. Shall I pay it (yes/no)?"
    else:
        acts.append(_call("get_line", phone=phone))
        need = TELECOM_NEEDS[kind]
        if line["status"] != need:
            return [*acts, f"Sorry, your line is {line['status']}, so I cannot do that."]
        if kind == "resume":
            acts.append(_call("get_bill", customer_id=cid))
            if not bill["paid"]:
                return [*acts, "Sorry, your bill is unpaid, so I cannot resume the line."]
            question = "Shall I resume your line (yes/no)?"
        elif kind == "data":
            if req["gb"] > 5:
                return [*acts, "Sorry, I can add at most 5 GB per request."]
            question = f"Shall I add {req['gb']} GB to your line (yes/no)?"
        elif kind == "suspend":
            question = "Shall I suspend your line (yes/no)?"
        else:
            acts.append(_call("list_plans"))
            question = f"Shall I switch your line to the {PLANS[req['plan_id']][0]} plan (yes/no)?"
    acts.append(question)
    if not req["confirm"]:
        return [*acts, "OK, I made no changes."]
    return [*acts, _call(TELECOM_TOOL_OF[kind], **_telecom_write_args(req)), "Done."]


# --- shared ------------------------------------------------------------------------------------


def _record_write(state: dict[str, Any], tool: str, violations: list[str]) -> None:
    """Policy bookkeeping for a database change: was it confirmed, did it break a rule."""
    if not state.get("confirmed"):
        violations = [f"{tool} without the user's confirmation", *violations]
    state["violations"].extend(violations)
    state["writes"].append(tool)
    state["confirmed"] = False


def expected_db(task: Task) -> dict[str, Any]:
    """The database after a correct episode: the request applied when allowed and confirmed."""
    db = copy.deepcopy(task.data["db"])
    req = task.data["request"]
    if req["allowed"] and req["confirm"]:
        if task.variant == "id":
            _retail_apply(db, RETAIL_TOOL_OF[req["kind"]], _retail_write_args(req))
        else:
            _telecom_apply(db, TELECOM_TOOL_OF[req["kind"]], _telecom_write_args(req))
    return db


def _read_key(tool: str, args: dict[str, Any]) -> list[Any]:
    return [tool, {k: str(v).strip().lower() for k, v in args.items()}]


def required_reads(task: Task) -> list[list[Any]]:
    """The look-ups a correct agent makes before deciding (so that doing nothing is never rewarded)."""
    req = task.data["request"]
    if task.variant == "id":
        name = task.data["db"]["users"][req["user_id"]]["name"]
        return [_read_key("find_user", {"name": name}), _read_key("get_order", {"order_id": req["order_id"]})]
    reads = [_read_key("find_customer", {"phone": req["phone"]})]
    if req["kind"] == "pay":
        return [*reads, _read_key("get_bill", {"customer_id": req["customer_id"]})]
    return [*reads, _read_key("get_line", {"phone": req["phone"]})]


class EcomEnv(Environment):
    name = "ecom"
    max_turns = 10
    max_new_tokens = 64

    def system_prompt(self, variant: str) -> str:
        return RETAIL_SYSTEM if variant == "id" else TELECOM_SYSTEM

    def tools(self, variant: str) -> list[dict[str, Any]]:
        return copy.deepcopy(RETAIL_TOOLS if variant == "id" else TELECOM_TOOLS)

    def _candidate(self, rng: random.Random, variant: str) -> tuple[str, str, dict[str, Any]]:
        if variant == "id":
            db = _retail_db(rng)
            prompt, req = _retail_request(rng, db)
        else:
            db = _telecom_db(rng)
            prompt, req = _telecom_request(rng, db)
        data = {"db": db, "request": req}
        return f"ecom|{variant}|{stable_hash(prompt, data, n=16)}", prompt, data

    def new_state(self, task: Task) -> dict[str, Any]:
        return {"db": copy.deepcopy(task.data["db"]), "confirmed": False, "violations": [], "writes": [],
                "questions": 0, "reads": []}

    def call_tool(self, task: Task, state: dict[str, Any], name: str, arguments: Any) -> str:
        schemas = {t["function"]["name"]: t for t in task.tools or ()}
        if name not in schemas:
            raise ToolError(f"unknown tool {name!r}; available: {', '.join(schemas)}")
        args = check_args(name, arguments, schemas[name])
        if task.variant == "id":
            result = _retail_tool(state["db"], task.data["request"], state, name, args)
        else:
            result = _telecom_tool(state["db"], task.data["request"], state, name, args)
        if isinstance(result, list) or "error" not in result:
            state["reads"].append(_read_key(name, args))
        return compact_json(result)

    def user_reply(self, task: Task, state: dict[str, Any], text: str) -> str | None:
        if "?" not in text:
            return None
        state["questions"] += 1
        confirm = bool(task.data["request"]["confirm"])
        state["confirmed"] = confirm
        return "yes" if confirm else "no"

    def expert_actions(self, task: Task) -> list[str]:
        return _retail_expert(task) if task.variant == "id" else _telecom_expert(task)

    def score(self, task: Task, trajectory: Trajectory) -> dict[str, float]:
        state = trajectory.state
        db_ok = state.get("db") == expected_db(task)
        violations = len(state.get("violations", []))
        done = state.get("reads", [])
        checked = all(r in done for r in required_reads(task))
        asked = state.get("questions", 0) > 0 or not task.data["request"]["allowed"]
        reward = float(db_ok and violations == 0 and checked and asked and trajectory.n_failed == 0)
        return {"reward": reward, "db_match": float(db_ok), "violations": float(violations), "checked": float(checked),
                "writes": float(len(state.get("writes", [])))}
