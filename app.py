"""Sharding Lab: see how JAX shards a Flax NNX model across devices, by clicking."""

import streamlit as st

from sharding_lab.app import ui

st.set_page_config(page_title="Sharding Lab", page_icon=":material/grid_view:", layout="wide")
ui.init_state()
ui.restore_link()
page = st.navigation([
    st.Page("app_pages/layout.py", title="Layout", icon=":material/grid_view:", default=True),
    st.Page("app_pages/train.py", title="Train", icon=":material/show_chart:"),
    st.Page("app_pages/communication.py", title="Communication", icon=":material/swap_horiz:"),
    st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("app_pages/lesson.py", title="Lesson", icon=":material/school:"),
])
page.run()
