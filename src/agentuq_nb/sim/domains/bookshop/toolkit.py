"""Tools of the ``bookshop`` domain: a small online bookshop (customers, books, orders).

Tools enforce what is physically impossible (cancelling a shipped order, returning
an order that has not arrived); business rules that need judgement (the 30-day
return window, acting only on the caller's own orders, no discounts) live in
``policy.md`` and are the agent's job, as in τ²-bench. Docstrings are the tool
descriptions the model sees: keep them one short sentence.
"""
from __future__ import annotations

import copy
from typing import Any

from agentuq_nb.sim.domain import ToolError, Toolkit, tool


class BookshopToolkit(Toolkit):
    def _customer(self, customer_id: str) -> dict[str, Any]:
        customer = self.db["customers"].get(customer_id.strip())
        if customer is None:
            raise ToolError(f"Customer {customer_id} not found")
        return customer

    def _order(self, order_id: str) -> dict[str, Any]:
        order = self.db["orders"].get(order_id.strip())
        if order is None:
            raise ToolError(f"Order {order_id} not found")
        return order

    @tool("read")
    def get_customer(self, customer_id: str) -> dict[str, Any]:
        """Look up a customer: name, membership, store credit and order ids."""
        return copy.deepcopy(self._customer(customer_id))

    @tool("read")
    def get_order(self, order_id: str) -> dict[str, Any]:
        """Look up an order: status, books, total, address and dates."""
        return copy.deepcopy(self._order(order_id))

    @tool("read")
    def find_book(self, title: str) -> list[dict[str, Any]]:
        """Search books by title: author, price and copies in stock.

        Args:
            title: The book title or a part of it.
        """
        needle = title.strip().lower()
        if not needle:
            raise ToolError("Give a title to search for")
        hits = [copy.deepcopy(b) for b in self.db["books"].values() if needle in b["title"].lower()]
        if not hits:
            raise ToolError(f"No book with a title like {title!r}")
        return hits

    @tool("write")
    def cancel_order(self, order_id: str) -> dict[str, Any]:
        """Cancel a pending order."""
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ToolError(f"Order {order['order_id']} is {order['status']}; only pending orders can be cancelled")
        order["status"] = "cancelled"
        for item in order["items"]:
            self.db["books"][item["book_id"]]["stock"] += item["quantity"]
        return copy.deepcopy(order)

    @tool("write")
    def update_address(self, order_id: str, address: str) -> dict[str, Any]:
        """Change the delivery address of a pending order.

        Args:
            order_id: The order id, such as O1001.
            address: The new address.
        """
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ToolError(f"Order {order['order_id']} is {order['status']}; only pending orders can change address")
        if not address.strip():
            raise ToolError("The new address is empty")
        order["address"] = address.strip()
        return copy.deepcopy(order)

    @tool("write")
    def return_order(self, order_id: str) -> dict[str, Any]:
        """Return a delivered order and refund its total as store credit."""
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ToolError(f"Order {order['order_id']} is {order['status']}; only delivered orders can be returned")
        order["status"] = "returned"
        customer = self._customer(order["customer_id"])
        customer["store_credit"] = customer["store_credit"] + order["total"]
        return copy.deepcopy(order)

    @tool("generic")
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the customer to a human agent.

        Args:
            summary: A short summary of the customer's problem.
        """
        return "Transfer successful"


TOOLKIT = BookshopToolkit
